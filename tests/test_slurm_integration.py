"""Real Slurm: sbatch + `srun --mpi=pmix` on a two-node cluster the suite starts itself (fixtures_slurm.py).

A job trains for real and is collected into the store; SIGINT to dlrun and an external scancel both end the
job and record the run as cancelled; a rank that dies ends the whole job within 30 s and the run is
recorded failed with its logs.
"""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cli_json, run_cli
from fixtures_slurm import CLUSTER_SYSTEM

pytestmark = [pytest.mark.slurm, pytest.mark.mpi]


def _popen_run(cluster, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dlrun.cli", "run", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **cluster.env})


def _wait_for_job(home: Path, timeout: float = 120) -> tuple[Path, str]:
    """The staging run directory and the job id, once the job has been submitted."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for job_file in (home / "runs").glob(".staging-*/job.json"):
            try:
                return job_file.parent, json.loads(job_file.read_text())["job_id"]
            except (OSError, ValueError):
                pass
        time.sleep(0.2)
    raise AssertionError("the job was never submitted")


def _wait_until_training(run_dir: Path, timeout: float = 120) -> None:
    """Rank 0 has printed a step row: the job is really running on both nodes."""
    log = run_dir / "logs" / "rank.0" / "stdout"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if log.exists() and "images/sec" in log.read_text(errors="replace"):
            return
        time.sleep(0.3)
    raise AssertionError(f"rank 0 never started training; {log} has: "
                         + (log.read_text(errors="replace")[-2000:] if log.exists() else "(nothing)"))


def _db_status(home: Path) -> list[tuple]:
    db = sqlite3.connect(home / "results.sqlite")
    try:
        return db.execute("SELECT status, scheduler, world_size FROM runs").fetchall()
    finally:
        db.close()


def test_two_node_job_trains_and_is_collected(slurm_cluster, dlrun_home, tmp_path):
    started = time.time()
    hostile = f"x'y\"z;$(touch {tmp_path}/pwned) `touch {tmp_path}/pwned2`\nsecond line"
    proc = run_cli("run", "trivial", "--system", CLUSTER_SYSTEM, "--nodes", "2", "--env", f"HOSTILE={hostile}",
                   env=slurm_cluster.env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "submitted slurm job" in proc.stderr
    assert "total images/sec" in proc.stdout  # rank 0's log was followed live

    runs = cli_json("results", "list", env=slurm_cluster.env)
    assert len(runs) == 1
    run = runs[0]
    assert (run["status"], run["scheduler"], run["launcher"], run["world_size"]) == ("ok", "slurm", "srun", 2)
    shown = cli_json("results", "show", run["id"], env=slurm_cluster.env)
    extra = shown["results"][0]["extra"]
    assert extra["world_size"] == 2 and extra["rank_source"] == "pmix"  # ranks came from srun's PMIx
    assert len(extra["per_rank_images_per_sec"]) == 2

    run_dir = Path(run["run_dir"])
    script = (run_dir / "run.sh").read_text()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks-per-node=1" in script
    assert "srun --mpi=pmix --nodes=2 --ntasks=2" in script and "--kill-on-bad-exit=1" in script
    job = json.loads((run_dir / "job.json").read_text())
    for name in ("plan.json", "inventory.json", "preflight.json", "status.json", "result.json", "output.log",
                 f"slurm-{job['job_id']}.out", "logs/rank.0/stdout", "logs/rank.1/stdout"):
        assert (run_dir / name).is_file(), name
    inventory = json.loads((run_dir / "inventory.json").read_text())
    assert inventory["mpi"]["flavour"] == "openmpi" and "pmix" in inventory["mpi"]["slurm_mpi_plugins"]
    assert "DLRUN_RESULT" in (run_dir / "logs" / "rank.0" / "stdout").read_text()
    assert "JobState=COMPLETED" in slurm_cluster.scontrol_job(job["job_id"])
    assert not list((dlrun_home / "runs").glob(".staging-*"))
    assert not list(tmp_path.glob("pwned*")), "an injected command ran inside the batch job"
    # One telemetry sampler per node (an overlapping srun step), stopped by the script's EXIT trap.
    series = sorted((run_dir / "telemetry").glob("*.jsonl"))
    assert [path.stem for path in series] == ["n1", "n2"], (run_dir / "telemetry" / "sampler.log").read_text()
    for path in series:
        last = json.loads(path.read_text().splitlines()[-1])
        assert last["reason"] in ("stop file", "SIGTERM") and last["samples"] >= 1, last
    assert json.loads((run_dir / "status.json").read_text())["telemetry"]["nodes"] == 2
    print(f"two-node slurm run: {time.time() - started:.1f} s wall, {extra['value']:.1f} images/sec")


@pytest.mark.parametrize("launcher,rank_source", [("mpirun", "openmpi"), ("torchrun", "torchrun")])
def test_other_launchers_inside_the_allocation(slurm_cluster, dlrun_home, launcher, rank_source):
    """mpirun (hybrid model: OpenMPI starts its daemons through Slurm on both nodes) and torchrun (one agent
    per node through srun, c10d rendezvous) inside the same sbatch allocation."""
    proc = run_cli("run", "trivial", "--system", CLUSTER_SYSTEM, "--nodes", "2", "--launcher", launcher,
                   env=slurm_cluster.env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = cli_json("results", "list", env=slurm_cluster.env)[0]
    assert (run["status"], run["launcher"], run["world_size"]) == ("ok", launcher, 2)
    extra = cli_json("results", "show", run["id"], env=slurm_cluster.env)["results"][0]["extra"]
    assert extra["rank_source"] == rank_source and extra["world_size"] == 2


def test_sigint_cancels_the_job_and_records_cancelled(slurm_cluster, dlrun_home):
    proc = _popen_run(slurm_cluster, "trivial", "--system", CLUSTER_SYSTEM, "--nodes", "2", "--steps", "1000000")
    try:
        run_dir, job_id = _wait_for_job(dlrun_home)
        _wait_until_training(run_dir)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    assert _db_status(dlrun_home) == [("cancelled", "slurm", 2)]
    assert "JobState=CANCELLED" in slurm_cluster.scontrol_job(job_id)
    final = dlrun_home / "runs" / run_dir.name.replace(".staging-", "")
    status = json.loads((final / "status.json").read_text())
    assert status["state"] == "cancelled" and "SIGINT" in status["reason"]


def test_external_scancel_records_cancelled(slurm_cluster, dlrun_home):
    proc = _popen_run(slurm_cluster, "trivial", "--system", CLUSTER_SYSTEM, "--nodes", "2", "--steps", "1000000")
    try:
        run_dir, job_id = _wait_for_job(dlrun_home)
        _wait_until_training(run_dir)
        assert slurm_cluster.run("scancel", job_id).returncode == 0
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out + err
    assert _db_status(dlrun_home) == [("cancelled", "slurm", 2)]
    final = dlrun_home / "runs" / run_dir.name.replace(".staging-", "")
    assert "was cancelled" in json.loads((final / "status.json").read_text())["reason"]


DYING_PYTHON = """#!/usr/bin/env bash
# Rank 1 is killed with SIGKILL once rank 0 has printed a training step (however long start-up took on a
# loaded machine); the others block in the next all-reduce.
if [ "${{SLURM_PROCID:-}}" = 1 ]; then
  ( until grep -q "images/sec" "${{DLRUN_RUN_DIR}}/logs/rank.0/stdout" 2>/dev/null; do sleep 0.2; done
    date +%s.%N > "${{DLRUN_RUN_DIR}}/rank1-killed-at"; kill -9 $$ ) &
fi
exec {python} "$@"
"""


def test_a_dying_rank_ends_the_job_and_is_recorded_failed(slurm_cluster, dlrun_home, tmp_path):
    """srun's --kill-on-bad-exit ends the job when rank 1 dies; without it the other rank would wait in its
    all-reduce until the harness's collective timeout (30 min) or the job's time limit (10 min)."""
    from dlrun.paths import HARNESS_DIR

    wrapper = tmp_path / "dying-python"
    wrapper.write_text(DYING_PYTHON.format(python=sys.executable))
    wrapper.chmod(0o755)
    images = slurm_cluster.catalog / "images"
    images.mkdir(exist_ok=True)
    (images / "dying.yaml").write_text(
        f"name: dying-host\ndescription: this host's Python, but rank 1 gets SIGKILL during training\n"
        f"kind: host\narch: [{os.uname().machine}]\npython: {wrapper}\nharness_dir: {HARNESS_DIR}\n")
    try:
        proc = run_cli("run", "trivial", "--system", CLUSTER_SYSTEM, "--nodes", "2", "--image", "dying-host",
                       "--steps", "1000000", "--batch-size", "2", env=slurm_cluster.env, timeout=300)
    finally:
        (images / "dying.yaml").unlink()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert _db_status(dlrun_home) == [("failed", "slurm", 2)]
    run = cli_json("results", "list", env=slurm_cluster.env)[0]
    run_dir = Path(run["run_dir"])
    status = json.loads((run_dir / "status.json").read_text())
    killed_at = float((run_dir / "rank1-killed-at").read_text())
    assert status["state"] == "failed"
    # a bound far from both (and no expectation of speed): which mechanism ended the job, not how fast
    assert status["finished_at"] - killed_at < 300, f"the job lingered {status['finished_at'] - killed_at:.1f} s"
    assert "FAILED" in status["reason"] or "exit code" in status["reason"]
    # The logs stay with the run: rank 0 trained before the failure, srun reported the killed task.
    assert "images/sec" in (run_dir / "logs" / "rank.0" / "stdout").read_text()
    assert "Killed" in (run_dir / "output.log").read_text() or "task 1" in (run_dir / "output.log").read_text()
    print(f"dying rank: job ended {status['finished_at'] - killed_at:.1f} s after rank 1 was killed")
