"""A real two-node Slurm cluster on this host, started by the test suite itself.

munged (on a private socket), slurmctld and two slurmd (n1, n2) run from a generated slurm.conf in a
temporary directory; `srun --mpi=pmix` works across both "nodes". Partition `debug` (the default) holds both,
partition `single` (at most an hour) n2 alone, so that a view of the cluster has two partitions. Needs root and the Debian packages
slurm-wlm and munge (`make sysdeps`); without them the tests FAIL with what to install, they never skip.
Everything is stopped, by the process ids this fixture started, at the end of the session.
"""
from __future__ import annotations

import os
import platform
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from loopback import free_port

TOOLS = ("munged", "munge", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "scancel", "sinfo")
CLUSTER_SYSTEM = "dlrun-testcluster"


def _which(tool: str) -> str | None:
    return shutil.which(tool) or next((str(p) for p in (Path("/usr/sbin") / tool, Path("/sbin") / tool)
                                       if p.exists()), None)


def _wait_for(predicate, timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    detail = ""
    if log is not None and log.exists():
        detail = "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-20:])
    pytest.fail(f"test Slurm cluster: {what} not ready after {timeout:.0f} s{detail}")


def _stop_pid(pid: int, timeout: float = 15) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            try:  # reap it if it is our child
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.2)


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    catalog: Path
    env: dict[str, str]
    pid_files: list[Path] = field(default_factory=list)

    def scontrol_job(self, job_id: str) -> str:
        return subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True,
                              env={**os.environ, **self.env}).stdout

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, env={**os.environ, **self.env},
                              timeout=60)


#: What both test clusters' slurm.conf say (this one's and tests/fixtures_netns.py's), after their names and hosts.
SLURM_COMMON = """\
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=5
MinJobAge=600
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
TmpFS={root}/tmp/%n
"""

SLURM_CONF = """\
ClusterName=dlruntest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
""" + SLURM_COMMON + """\
NodeName=n1 NodeHostname={host} NodeAddr=127.0.0.1 Port={n1_port} CPUs=1 RealMemory=4000 State=UNKNOWN
NodeName=n2 NodeHostname={host} NodeAddr=127.0.0.1 Port={n2_port} CPUs=1 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=single Nodes=n2 MaxTime=60 State=UP
"""

TEST_SYSTEM = """\
name: {name}
description: "{description}"
arch: {arch}
nodes: {nodes}
cpu: {{sockets: 1, cores_per_socket: 1}}
memory_gb: 4
fabrics: [tcp]
scheduler: slurm
launcher: srun
runtime: host
default_image: host
batch_sizes: {{trivial: 8, resnet18: 2}}
default_steps: 3
default_warmup_steps: 1
scheduler_options: {{time: "00:10:00", partition: {partition}}}
sources:
  - {{doc: "dlrun test suite", where: "tests/{where}"}}
"""


def system_yaml(name: str, description: str, nodes: int, partition: str, where: str) -> str:
    """A system profile of a test cluster (hosts of one CPU each, runtime host)."""
    return TEST_SYSTEM.format(name=name, description=description, arch=platform.machine(), nodes=nodes,
                              partition=partition, where=where)


def _start(argv: list[str], env: dict[str, str], what: str) -> None:
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        pytest.fail(f"test Slurm cluster: {what} did not start ({proc.returncode}): {proc.stderr.strip()}")


def _require_tools() -> None:
    missing = [tool for tool in TOOLS if not _which(tool)]
    if missing:
        pytest.fail(f"the Slurm integration tests need {', '.join(missing)}; install them with `make sysdeps` "
                    "(Debian: apt-get install -y slurm-wlm munge)")
    if os.geteuid() != 0:
        pytest.fail("the Slurm integration tests start slurmd, which must run as root; run the tests as root")
    try:
        pwd.getpwnam("munge")
    except KeyError:
        pytest.fail("user 'munge' is missing; reinstall the munge package (apt-get install --reinstall munge)")


def start_munged(started: list[Path], env: dict[str, str]) -> tuple[Path, Path]:
    """munged on a private socket: (its directory, its socket); its pid file appended to `started`."""
    munge_user = pwd.getpwnam("munge")
    # munged requires every directory above its socket to be searchable by all, which pytest's private
    # temporary root is not: the munge directory lives directly under the system temporary directory.
    munge_dir = Path(tempfile.mkdtemp(prefix="dlrun-test-munge-"))
    os.chown(munge_dir, munge_user.pw_uid, munge_user.pw_gid)
    munge_dir.chmod(0o755)
    key = Path("/etc/munge/munge.key")
    if not key.exists():
        key = munge_dir / "munge.key"
        subprocess.run(["runuser", "-u", "munge", "--", "mungekey", "--create", f"--keyfile={key}"], check=True)
    socket_path = munge_dir / "munge.socket"
    _start(["runuser", "-u", "munge", "--", _which("munged"), f"--socket={socket_path}",
            f"--pid-file={munge_dir / 'munged.pid'}", f"--log-file={munge_dir / 'munged.log'}",
            f"--seed-file={munge_dir / 'munged.seed'}", f"--key-file={key}"], env, "munged")
    started.append(munge_dir / "munged.pid")
    _wait_for(lambda: subprocess.run(["munge", "-S", str(socket_path), "-n"], capture_output=True).returncode
              == 0, 20, "munged", munge_dir / "munged.log")
    return munge_dir, socket_path


def stop_all(started: list[Path]) -> None:
    """Stop the daemons whose pid files `started` lists, the last started first."""
    for pid_file in reversed(started):
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            continue
        _stop_pid(pid)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory) -> SlurmCluster:
    _require_tools()
    root = Path(tmp_path_factory.mktemp("slurm"))
    for sub in ("state", "log", "spool", "tmp/n1", "tmp/n2", "munge", "catalog/systems"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    started: list[Path] = []
    env = {"SLURM_CONF": str(root / "slurm.conf"), "DLRUN_PATH": str(root / "catalog")}
    full_env = {**os.environ, **env}
    munge_dir = None
    try:
        munge_dir, socket_path = start_munged(started, full_env)
        host = platform.node()
        (root / "slurm.conf").write_text(SLURM_CONF.format(host=host, root=root, munge_socket=socket_path,
                                                           ctld_port=free_port(), n1_port=free_port(),
                                                           n2_port=free_port()))
        _start([_which("slurmctld"), "-i"], full_env, "slurmctld")
        started.append(root / "slurmctld.pid")
        for node in ("n1", "n2"):
            _start([_which("slurmd"), "-N", node], full_env, f"slurmd {node}")
            started.append(root / f"slurmd-{node}.pid")

        def idle() -> bool:
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, env=full_env)
            states = dict(line.split() for line in out.stdout.splitlines() if line.strip())
            return states.get("n1") == "idle" and states.get("n2") == "idle"

        _wait_for(idle, 60, "two idle slurmd", root / "log" / "slurmctld.log")
        (root / "catalog" / "systems" / "testcluster.yaml").write_text(
            system_yaml(CLUSTER_SYSTEM, "Two slurmd (n1, n2) on this host, started by the test suite: 2 nodes x 1 CPU",
                        2, "debug", "fixtures_slurm.py"))
        yield SlurmCluster(root=root, conf=root / "slurm.conf", catalog=root / "catalog", env=env,
                           pid_files=started)
    finally:
        if (root / "slurmctld.pid").exists():
            subprocess.run(["scancel", "--full", "--partition=debug"], env=full_env, capture_output=True)
            time.sleep(1)
        stop_all(started)
        if munge_dir is not None:
            shutil.rmtree(munge_dir, ignore_errors=True)
