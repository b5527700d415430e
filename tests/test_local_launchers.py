"""Real runs on this machine through the launchers: mpirun with hostile data paths and env values reaching the
ranks intact, torchrun, a dying rank under mpirun (the job ends, the run is recorded failed), and the NCCL
transport check on a run whose ranks report NET/Socket on an InfiniBand system."""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import pytest
from conftest import UNLIMITED_MEMLOCK_ENV, cli_json, run_cli

from dlrun.paths import HARNESS_DIR

ARCH = os.uname().machine


def _site(tmp_path: Path, python: Path, name: str) -> dict[str, str]:
    images = tmp_path / "site" / "images"
    images.mkdir(parents=True, exist_ok=True)
    (images / f"{name}.yaml").write_text(
        f"name: {name}\ndescription: this host's Python behind a test wrapper\nkind: host\narch: [{ARCH}]\n"
        f"python: {json.dumps(str(python))}\nharness_dir: {json.dumps(str(HARNESS_DIR))}\n")
    return {"DLRUN_PATH": str(tmp_path / "site")}


def _wrapper(path: Path, body: str) -> Path:
    path.write_text(f"#!/usr/bin/env bash\n{body}\nexec {sys.executable} \"$@\"\n")
    path.chmod(0o755)
    return path


@pytest.mark.mpi
def test_mpirun_two_ranks_with_hostile_data_path_and_env(dlrun_home, tmp_path):
    data = tmp_path / "im ages 'q' \"dq\";$(touch pwned-data)`touch pwned-bq`\nline"
    # --data makes the ranks train on the dataset: a real one (dlrun data synth) under the hostile name
    made = run_cli("data", "synth", "--format", "jpeg", "--images", "8", "--classes", "2", "--size", "40", str(data))
    assert made.returncode == 0, made.stderr
    value = "a b'c\"d;e $(touch pwned-env) `touch pwned-env2` ${HOME}\nnext line"
    dump = tmp_path / "seen"
    dump.mkdir()
    wrapper = _wrapper(tmp_path / "py", f'printf "%s" "$HOSTILE" > "{dump}/rank-${{OMPI_COMM_WORLD_RANK}}"')
    env = _site(tmp_path, wrapper, "recording-host")
    proc = run_cli("run", "trivial", "--image", "recording-host", "--ranks-per-node", "2", "--steps", "2",
                   "--warmup-steps", "1", "--batch-size", "4", "--data", str(data), "--env", f"HOSTILE={value}",
                   "--launcher-arg", "--tag-output", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not list(tmp_path.rglob("pwned*")) and not list(dlrun_home.rglob("pwned*"))
    assert (dump / "rank-0").read_text() == value and (dump / "rank-1").read_text() == value
    run = cli_json("results", "list", env=env)[0]
    assert run["status"] == "ok" and run["world_size"] == 2
    plan = json.loads((Path(run["run_dir"]) / "plan.json").read_text())
    assert plan["data"] == {"path": str(data), "format": "jpeg", "staged_copy": None, "mount": "/data"}
    assert plan["binds"] == []  # the dataset is the plan's `data`, bound at /data by the runtime
    assert plan["env"]["HOSTILE"] == value
    extra = cli_json("results", "show", run["id"], env=env)["results"][0]["extra"]
    assert extra["data_source"] == "jpeg" and extra["data_path"] == str(data) and extra["images_decoded"] > 0
    assert "[1,0]<stdout>:" in (Path(run["run_dir"]) / "output.log").read_text()  # the extra mpirun flag took


@pytest.mark.mpi
def test_torchrun_two_ranks(dlrun_home):
    proc = run_cli("run", "trivial", "--launcher", "torchrun", "--ranks-per-node", "2", "--steps", "2",
                   "--warmup-steps", "1", "--batch-size", "4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = cli_json("results", "list")[0]
    assert (run["status"], run["launcher"], run["world_size"]) == ("ok", "torchrun", 2)
    extra = cli_json("results", "show", run["id"])["results"][0]["extra"]
    assert extra["rank_source"] == "torchrun"
    assert "torch.distributed.run --nnodes 1 --nproc_per_node 2" in (Path(run["run_dir"]) / "run.sh").read_text()


@pytest.mark.mpi
def test_dying_rank_under_mpirun_ends_the_job_and_is_recorded_failed(dlrun_home, tmp_path):
    marker = tmp_path / "killed-at"
    wrapper = _wrapper(tmp_path / "py", (
        'if [ "${OMPI_COMM_WORLD_RANK:-}" = 1 ]; then\n'
        f'  ( sleep 6; date +%s.%N > "{marker}"; kill -9 $$ ) &\n'
        "fi"))
    env = _site(tmp_path, wrapper, "dying-host")
    started = time.time()
    proc = run_cli("run", "trivial", "--image", "dying-host", "--ranks-per-node", "2", "--steps", "1000000",
                   "--batch-size", "2", env=env, timeout=300)
    ended = time.time()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    killed_at = float(marker.read_text())
    assert ended - killed_at < 30, f"the job lingered {ended - killed_at:.1f} s after a rank died"
    run = cli_json("results", "list", env=env)[0]
    assert run["status"] == "failed"
    run_dir = Path(run["run_dir"])
    status = json.loads((run_dir / "status.json").read_text())
    assert status["exit_code"] != 0
    # which rank, on which host, of which signal (before: "exit code 137: ------", mpirun's last line)
    assert status["reason"].startswith(f"rank 1 on host {platform.node()} was killed by signal 9 (SIGKILL), "
                                       "as mpirun reports; its log ")
    assert (run_dir / "logs" / "1" / "rank.0" / "stdout").is_file()  # the logs stay with the run
    print(f"mpirun dying rank: {ended - killed_at:.1f} s from the kill to the end of dlrun ({ended - started:.0f} s run)")


NCCL_SOCKET_RUN = """#!/usr/bin/env bash
# Stands in for a GPU rank: NCCL's INFO lines (it fell back to sockets), then the harness result line.
echo "node1:1:1 [0] NCCL INFO NET/IB : No device found."
echo "node1:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>"
echo "node1:1:1 [0] NCCL INFO Using network Socket"
echo "node1:1:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0"
echo 'DLRUN_RESULT {"metric": "throughput", "value": 100.0, "unit": "images/sec", "model": "trivial", "batch_size_per_rank": 8, "world_size": 1}'
"""

IB_SYSTEM = f"""name: fake-ib-gpu
description: one GPU node on InfiniBand (for the NCCL transport check)
arch: {ARCH}
nodes: 1
cpu: {{sockets: 1, cores_per_socket: 2}}
memory_gb: 8
gpus: {{model: Test GPU, count_per_node: 1, memory_gb: 16}}
fabrics: [ib]
fabric_config: {{ib: {{hca: ["mlx5_0:1"]}}}}
scheduler: local
launcher: mpirun
runtime: host
default_image: nccl-socket
"""


def test_rdma_run_whose_ranks_used_sockets_is_marked_failed(dlrun_home, tmp_path):
    python = tmp_path / "nccl-python"
    python.write_text(NCCL_SOCKET_RUN)
    python.chmod(0o755)
    env = {**_site(tmp_path, python, "nccl-socket"), **UNLIMITED_MEMLOCK_ENV}  # locked memory as on an RDMA node
    (tmp_path / "site" / "systems").mkdir()
    (tmp_path / "site" / "systems" / "ib.yaml").write_text(IB_SYSTEM)
    refused = run_cli("run", "trivial", "--system", "fake-ib-gpu", env=env)
    assert refused.returncode == 2 and "fabric ib was asked for, but this node offers" in refused.stderr
    proc = run_cli("run", "trivial", "--system", "fake-ib-gpu", "--skip-checks", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "NCCL used NET/Socket" in proc.stderr
    run = cli_json("results", "list", env=env)[0]
    assert run["status"] == "failed" and run["value"] is None
    run_dir = Path(run["run_dir"])
    nccl = json.loads((run_dir / "nccl.json").read_text())
    assert nccl["ok"] is False and nccl["networks"] == ["Socket"] and nccl["net_channels"] == ["Socket"]
    assert "export NCCL_DEBUG=INFO" in (run_dir / "run.sh").read_text()
    assert json.loads((run_dir / "preflight.json").read_text())[0]["level"] == "error"


# A rank that prints one DLRUN_RESULT line in two writes, 2 s apart, so that mpirun reads them as two chunks (as
# it did to a 2,048-byte cut of a real result line under load in CI).
SPLIT_WRITER = r'''
import json, os, sys, time
line = "DLRUN_RESULT " + json.dumps({"pad": "x" * 2000, "metric": "throughput", "value": 12.5,
                                     "unit": "images/sec", "world_size": 1}) + "\n"
cut = line.index('"value"')  # between two keys, as in CI: the tag there makes the JSON malformed
os.write(1, line[:cut].encode())
time.sleep(2)
os.write(1, line[cut:].encode())
'''


@pytest.mark.mpi
def test_a_result_line_that_mpirun_tags_twice_is_read_whole(tmp_path):
    """Open MPI's --tag-output tags each chunk it reads from a rank: a line written in two chunks carries
    `[1,0]<stdout>:` again in its middle. The parser drops the rank's own tag inside its line; without that the
    run was recorded failed ("malformed JSON"), its result lost."""
    import shutil
    import subprocess

    from dlrun.results.parsers import dlrun_harness

    script = tmp_path / "split.py"
    script.write_text(SPLIT_WRITER)
    proc = subprocess.run([shutil.which("mpirun"), "-np", "1", "--oversubscribe", "--allow-run-as-root",
                           "--tag-output", sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if "DLRUN_RESULT" in line)
    assert line.count("<stdout>:") >= 2  # the state under test: tags inside the line (mpirun may cut it more than once)
    [result] = dlrun_harness.parse(proc.stdout)
    assert result.value == 12.5 and result.extra["pad"] == "x" * 2000
