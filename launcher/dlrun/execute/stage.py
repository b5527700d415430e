"""Staging a run: its directory (private, under a hidden name until it is stored), the files that describe it
(secrets redacted; their keyed fingerprints, dlrun.secrets.prints), and the environment the job starts with
(secrets included: the only place they go)."""
from __future__ import annotations

import os
import random
import socket
import time
from pathlib import Path
from typing import Any

from dlrun.errors import DlrunError
from dlrun.execute.envcapture import capture_environment
from dlrun.execute.prerun import Cleared
from dlrun.execute.record import provenance
from dlrun.execute.rundir import RunDir, new_run_id
from dlrun.job import RUN_DIR_VAR, RenderedJob
from dlrun.paths import private_dir
from dlrun.plan import Plan
from dlrun.preflight import findings_json, node_inventory
from dlrun.registry import RUNTIMES, SCHEDULERS
from dlrun.secrets.prints import key_path, write_prints
from dlrun.telemetry.launch import sampler_files


#: Where the rendezvous port is drawn from when the kernel's ephemeral range starts above it (Linux: 32768).
RENDEZVOUS_PORTS = (20000, 32767)
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_low() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))  # every address, as the rendezvous server (TCPStore) listens
        except OSError:
            return False
    return True


def free_port() -> int:
    """A free port for the job's rendezvous (MASTER_PORT), below the kernel's ephemeral range: a port from that
    range can be taken between this choice and rank 0's listen by any connection's source port, or by a rank's
    own connect to it (a TCP self-connection: rank 0 then fails with EADDRINUSE while the rank that connected
    to itself waits on its own request)."""
    low, high = RENDEZVOUS_PORTS[0], min(RENDEZVOUS_PORTS[1], _ephemeral_low() - 1)
    draw = random.Random()
    for _ in range(64 if high > low else 0):
        port = draw.randint(low, high)
        if _bindable(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # a kernel with no room below its range
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def secret_values(plan: Plan) -> dict[str, str]:
    return {name: plan.env[name] for name in plan.secret_names}


def stage(plan: Plan, rendered: RenderedJob, runs_root: Path,
          cleared: Cleared | None) -> tuple[RunDir, dict[str, Any], float]:
    """(run directory, provenance to store with the run, start time). `cleared`: what the pre-run steps found
    (without them: this node's inventory, no findings, no image check)."""
    forbidden = RUNTIMES.get(plan.runtime).bind_forbidden  # the run directory is bound into the container
    if any(ch in str(runs_root) for ch in forbidden):
        chars = " or ".join(repr(ch) for ch in forbidden)
        raise DlrunError(f"the run directory {str(runs_root)!r} contains {chars}, which runtime {plan.runtime} "
                         "cannot bind; set DLRUN_HOME to a path without them", exit_code=2)
    private_dir(runs_root.parent)
    private_dir(runs_root)
    checked = cleared is not None
    cleared = cleared or Cleared(inventory=node_inventory(), findings=[])
    run = RunDir(runs_root, new_run_id()).create()
    try:
        run.write_json("plan.json", plan.summary())
        run.write("run.sh", rendered.script, mode=0o700)
        for name, text in rendered.files.items():
            run.write(name, text)
        if plan.telemetry_period and not SCHEDULERS.get(plan.scheduler).runs_image:
            for name, text in sampler_files().items():  # run on every node, outside the container
                run.write(name, text)
        secrets = secret_values(plan)
        # before the job can print them: what a later dlrun redacts by, should this one not live to
        write_prints(run.path, list(secrets.values()), key_path(runs_root))
        env_capture = capture_environment(marked=plan.secret_env, values=secrets.values())
        run.write_json("environment.json", env_capture)
        run.write_json("inventory.json", cleared.inventory)
        if checked:
            run.write_json("preflight.json", findings_json(cleared.findings))
        base = {**provenance(plan, cleared.image_check), "hostname": env_capture["hostname"],
                "argv": env_capture["argv"], "mpi": env_capture["mpi"],
                # what the job's rules had to assume about its nodes (dlrun.jobcheck), as the job says in comments
                "job_assumptions": [{"rule": a.rule, "assumes": a.message} for a in rendered.assumptions]}
        run.write_json("provenance.json", base)  # for recovery, should this dlrun not live to store the run
        started = time.time()
        run.write_json("status.json", {"state": "running", "started_at": started, "pid": os.getpid()})
    except BaseException:
        run.discard()
        raise
    return run, base, started


def job_env(run: RunDir, plan: Plan) -> dict[str, str]:
    """The environment the job starts with: dlrun's own, the run directory, a free rendezvous port, and the
    values of the plan's secret variables (rendered scripts refer to them by name)."""
    env = dict(os.environ)
    env.update(secret_values(plan))
    env[RUN_DIR_VAR] = str(run.path)
    env["DLRUN_MASTER_PORT"] = str(free_port())
    return env
