"""Every way a run can end is recorded, with real signals and a real 2-rank mpirun job:
SIGINT, SIGTERM and SIGHUP to dlrun end the whole job (no rank left) and store the run `cancelled`;
a SIGKILLed dlrun's run is found by the next `dlrun results list` (`lost`, or `ok` when the job finished);
`--time` ends a job with a stopped rank (`timeout`); DLRUN_HOME is absolute, or a one-line error."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cli_json, run_cli
from job_gate import JobGate, wait_until

TRAIN = ["run", "trivial", "--ranks-per-node", "2", "--batch-size", "2", "--warmup-steps", "1"]


def _start(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dlrun.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd, env={**os.environ, **(env or {})})


def _training(home: Path, timeout: float = 180) -> Path:
    """The staging directory of the run, once rank 0 has printed a training step."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for staging in (home / "runs").glob(".staging-*"):
            log = staging / "logs" / "1" / "rank.0" / "stdout"
            if log.is_file() and "images/sec" in log.read_text(errors="replace"):
                return staging
        time.sleep(0.1)
    pytest.fail("the run did not start training")


def job_pids(staging: Path, rank: int | None = None) -> list[int]:
    """Live processes whose environment carries the run directory (mpirun and the ranks)."""
    wanted = [f"DLRUN_RUN_DIR={staging}".encode()] + ([f"OMPI_COMM_WORLD_RANK={rank}".encode()] if rank is not None
                                                      else [])
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{name}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state != "Z" and all(entry in environ for entry in wanted):
            found.append(int(name))
    return found


def sampler_ended(run_dir: Path, reasons: tuple[str, ...] = ("SIGTERM",), timeout: float = 30) -> None:
    """The run's telemetry series is complete (its end line, after at least one sample) and no sampler of the run
    is left."""
    deadline = time.monotonic() + timeout
    while True:
        (series,) = (run_dir / "telemetry").glob("*.jsonl")
        last = json.loads(series.read_text().splitlines()[-1])
        alive = [pid for pid in os.listdir("/proc") if pid.isdigit() and _sampler_of(pid, run_dir)]
        if ("end" in last and not alive) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert last.get("reason") in reasons and last["samples"] >= 1, last
    assert alive == [], "a telemetry sampler outlived its run"


def _sampler_of(pid: str, run_dir: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    staging = str(run_dir.parent / (".staging-" + run_dir.name.removeprefix(".staging-")))
    return any(part.endswith(b"telemetry_sampler.py") and (part.startswith(str(run_dir).encode())
                                                            or part.startswith(staging.encode())) for part in cmdline)


def _stored(home: Path, run_id: str) -> dict:
    return cli_json("results", "show", run_id, env={"DLRUN_HOME": str(home)})


@pytest.mark.mpi
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM", "SIGHUP"] * 3)
def test_a_signal_to_dlrun_ends_the_job_and_stores_it_cancelled(dlrun_home, signame):
    proc = _start(*TRAIN, "--steps", "100000000")
    staging = _training(dlrun_home)
    assert len(job_pids(staging)) >= 3  # mpirun and two ranks
    sent = time.monotonic()
    proc.send_signal(getattr(signal, signame))
    out, err = proc.communicate(timeout=120)  # bounds a hang; how fast dlrun leaves is printed, not asserted
    print(f"\n{signame}: dlrun exited {time.monotonic() - sent:.2f} s after the signal")
    assert proc.returncode == 128 + getattr(signal, signame), out + err
    assert job_pids(staging) == [], "a job process outlived dlrun"
    run_id = staging.name.removeprefix(".staging-")
    run = _stored(dlrun_home, run_id)
    assert run["status"] == "cancelled" and run["provenance"]["signal"] == signame
    assert run["provenance"]["reason"] == f"dlrun received {signame}; the job was ended"
    run_dir = Path(run["run_dir"])
    assert run_dir == dlrun_home / "runs" / run_id and not staging.exists()
    assert "images/sec" in (run_dir / "logs" / "1" / "rank.0" / "stdout").read_text()  # logs kept
    sampler_ended(run_dir)


@pytest.mark.mpi
@pytest.mark.parametrize("attempt", range(3))
def test_a_sigkilled_dlruns_run_is_found_by_the_next_command(dlrun_home, attempt):
    proc = _start(*TRAIN, "--steps", "100000000")
    staging = _training(dlrun_home)
    proc.kill()
    proc.communicate(timeout=60)
    runs = cli_json("results", "list")  # the next command that opens the store
    assert [(r["id"], r["status"]) for r in runs] == [(staging.name.removeprefix(".staging-"), "lost")]
    status = json.loads((Path(runs[0]["run_dir"]) / "status.json").read_text())
    assert status["recovered"] is True and "ended while its job ran; the job was ended" in status["reason"]
    assert job_pids(staging) == [] and not list((dlrun_home / "runs").glob(".staging-*"))
    sampler_ended(Path(runs[0]["run_dir"]), ("SIGTERM", "parent exited"))  # it watches dlrun


@pytest.mark.mpi
def test_a_finished_job_of_a_killed_dlrun_is_recovered_from_its_logs(dlrun_home, tmp_path):
    """dlrun is stopped while its job finishes, then killed: the result is in the rank logs and is stored. The
    job is held at its start (a gate the test opens) until dlrun is stopped, so it cannot finish first."""
    gate = JobGate(tmp_path / "gate", tokens=0)
    proc = _start(*TRAIN, "--steps", "30", env=gate.env())
    wait_until(lambda: proc.poll() is not None or gate.held(), "the job held at the gate")
    [held] = gate.held()
    staging = dlrun_home / "runs" / held
    proc.send_signal(signal.SIGSTOP)
    gate.allow(1)
    wait_until(lambda: gate.passed() and not job_pids(staging), "the job finished")
    proc.kill()
    proc.communicate(timeout=60)
    [run] = cli_json("results", "list")
    assert (run["status"], run["world_size"]) == ("ok", 2) and run["value"] > 0
    shown = cli_json("results", "show", run["id"])
    assert shown["provenance"]["recovered"] is True and shown["results"][0]["num_devices"] == 2
    assert shown["provenance"]["reason"].startswith("recovered from the job's logs after dlrun (pid ")


@pytest.mark.mpi
def test_time_limit_ends_a_job_with_a_stopped_rank(dlrun_home):
    started = time.monotonic()
    proc = _start(*TRAIN, "--steps", "100000000", "--time", "1")
    staging = _training(dlrun_home)
    [rank1] = job_pids(staging, rank=1)
    os.kill(rank1, signal.SIGSTOP)
    out, err = proc.communicate(timeout=600)  # bounds a hang: the limit (60 s) counts from the job's start
    print(f"\n--time 1 with rank 1 stopped: dlrun ended {time.monotonic() - started:.1f} s after it started")
    assert proc.returncode == 1
    assert job_pids(staging) == []
    run = _stored(dlrun_home, staging.name.removeprefix(".staging-"))
    assert run["status"] == "timeout"
    assert run["provenance"]["reason"] == "the time limit of 60 s (--time 1) was reached; the job was ended"
    assert f"run {run['id']} timeout: the time limit of 60 s" in err
    sampler_ended(Path(run["run_dir"]))


@pytest.mark.slow
def test_a_relative_dlrun_home_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    proc = _start("run", "trivial", "--ranks-per-node", "2", "--steps", "1", "--warmup-steps", "1",
                  "--batch-size", "2", cwd=tmp_path, env={"DLRUN_HOME": "rel-home"})
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    [run] = cli_json("results", "list", env={"DLRUN_HOME": str(tmp_path / "rel-home")})
    run_dir = Path(run["run_dir"])
    assert run_dir == tmp_path / "rel-home" / "runs" / run["id"]
    assert (run_dir / "logs" / "1" / "rank.1" / "stdout").is_file()
    assert [p.name for p in run_dir.iterdir() if p.name.startswith("rel")] == []


def test_an_unusable_dlrun_home_is_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = run_cli("run", "trivial", "--steps", "1", env={"DLRUN_HOME": str(blocker / "home")})
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"dlrun: error: cannot use '{blocker / 'home'}' under DLRUN_HOME: Not a directory; "
                                   "valid: a writable directory, e.g. DLRUN_HOME=~/.local/share/dlrun")


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["slurm", "lsf", "pbs"])
def test_a_signal_to_dlrun_cancels_a_batch_job(dlrun_home, tmp_path, scheduler):
    import fake_batch

    env = fake_batch.install(tmp_path / "batch")
    proc = _start("run", "trivial", "--system", f"fake-{scheduler}", "--steps", "100000000", "--batch-size", "2",
                  env=env)
    deadline = time.time() + 120
    while time.time() < deadline and not list((dlrun_home / "runs").glob(".staging-*/job.json")):
        time.sleep(0.2)
    # no wait for the job to get going: a signal before dlrun follows the job is kept and acted on there
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, out + err
    assert (tmp_path / "batch" / "state" / "killed").exists()  # scancel / bkill / qdel was called
    [run] = cli_json("results", "list", env=env)
    assert run["status"] == "cancelled"
    reason = cli_json("results", "show", run["id"], env=env)["provenance"]["reason"]
    assert reason == f"dlrun received SIGTERM; {scheduler} job {'7.server' if scheduler == 'pbs' else '7'} was cancelled"


@pytest.mark.mpi
def test_the_harness_collective_timeout_ends_a_job_with_a_stopped_rank(tmp_path):
    """What --time renders as --timeout-s: the surviving rank's gloo collective times out, and mpirun ends the
    job, without waiting for dlrun's own time limit."""
    from dlrun.paths import HARNESS_DIR

    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "DLRUN_RUN_DIR": str(tmp_path)}
    proc = subprocess.Popen(["mpirun", "-np", "2", "--bind-to", "none", "--output-filename", str(tmp_path / "logs"),
                             sys.executable, str(HARNESS_DIR / "harness_pytorch.py"), "--model", "trivial",
                             "--batch-size", "2", "--steps", "100000000", "--warmup-steps", "1", "--threads", "1",
                             "--expected-world-size", "2", "--timeout-s", "10"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    staging = tmp_path  # job_pids finds the ranks by DLRUN_RUN_DIR
    deadline = time.time() + 180
    while time.time() < deadline and "images/sec" not in _read(tmp_path / "logs" / "1" / "rank.0" / "stdout"):
        time.sleep(0.1)
    assert "images/sec" in _read(tmp_path / "logs" / "1" / "rank.0" / "stdout"), "rank 0 never trained a step"
    [rank1] = job_pids(staging, rank=1)
    os.kill(rank1, signal.SIGSTOP)
    stopped = time.monotonic()
    out, _ = proc.communicate(timeout=120)
    print(f"\n--timeout-s 10, rank 1 stopped: mpirun ended {time.monotonic() - stopped:.1f} s later")
    assert proc.returncode != 0
    # gloo's words for its timeout depend on the call rank 0 waits in when rank 1 stops (where that happens is
    # the machine's timing): a receive says the first, a coalesced broadcast of DDP's buffers the second
    assert re.search(r"Timed out waiting 10000ms|Application timeout caused pair closure", out), out[-3000:]
    assert job_pids(staging) == []


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


@pytest.mark.slow
def test_a_batch_job_outlives_its_killed_dlrun_and_is_stored_when_it_ends(dlrun_home, tmp_path):
    """A batch job belongs to its scheduler: after dlrun is SIGKILLed it is named while it runs and stored
    (from its output) once the scheduler reports it ended. The job is held at its start until the test has
    seen it named as running."""
    import fake_batch

    gate = JobGate(tmp_path / "gate", tokens=0)
    env = {**fake_batch.install(tmp_path / "batch"), **gate.env()}
    proc = _start("run", "trivial", "--system", "fake-slurm", "--steps", "300", "--batch-size", "2", env=env)
    wait_until(lambda: proc.poll() is not None or gate.held(), "the batch job held at the gate")
    wait_until(lambda: list((dlrun_home / "runs").glob(".staging-*/job.json")), "the job's record")
    proc.kill()
    proc.communicate(timeout=60)
    running = run_cli("results", "list", "--json", env=env)
    assert json.loads(running.stdout) == []
    assert "slurm job 7 is running without its dlrun; stored when it ends" in running.stderr
    gate.allow(1)
    wait_until((tmp_path / "batch" / "state" / "exit").exists, "the batch job's end")
    [run] = cli_json("results", "list", env=env)
    assert (run["status"], run["scheduler"]) == ("ok", "slurm") and run["value"] > 0
    shown = cli_json("results", "show", run["id"], env=env)
    assert shown["provenance"]["recovered"] is True
    assert not list((dlrun_home / "runs").glob(".staging-*"))
