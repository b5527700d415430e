"""Failure reasons that say what happened: the launcher's own message (as its users published it, see
tests/data/logs/SOURCES.md) gives the rank, host and signal or exit code, and the reason ends with that
rank's last log lines, or what Python's fault handler dumped (a real dump). And real ones: a rank of a real
2-rank mpirun run killed with SIGKILL, and with SIGABRT."""
from __future__ import annotations

import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, cli_json

from dlrun.execute.failure import RankFailure, exit_code_text, failure_reason, launcher_failure, log_ending

LOGS = REPO / "tests" / "data" / "logs" / "launcher-failures"

PUBLISHED = [
    ("ompi2661_mpirun_signal9.log", RankFailure("mpirun", 0, "host01", signal=9)),
    ("relion112_mpirun_rank4_signal9.log", RankFailure("mpirun", 4, "localhost", signal=9)),
    ("adda151_mpiexec_signal6_wrapped.log", RankFailure("mpiexec", 0, "proton", signal=6)),
    ("scream1762_mpiexec_rank3_exit1.log", RankFailure("mpiexec", 3, None, exit_code=1)),
    ("scats7_mpirun_traceback_exit1.log", RankFailure("mpirun", 0, None, exit_code=1)),
    ("csc4005_51_srun_killed.log", RankFailure("srun", 11, "node25", signal=9)),
    ("picongpu198_srun_exit1.log", RankFailure("srun", 10, "taurusi2031", exit_code=1)),
    ("desispec2744_srun_terminated.log", RankFailure("srun", 0, "nid002888", signal=15)),
    ("cppo6_torchrun_sigkill.log", RankFailure("torchrun", 0, "mlxlab115rp2n7682d40d9-20250521025625-6dyyd3-8nir8b-worker",
                                               signal=9)),
    ("llamafactory7032_torchrun_exit1.log", RankFailure("torchrun", 0, "iZl4v544jr5cejwaqci3xvZ", exit_code=1)),
]


@pytest.mark.parametrize("name,expected", PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_published_launcher_messages(name, expected):
    assert launcher_failure((LOGS / name).read_text()) == expected


def test_every_published_log_is_tested_and_sourced():
    files = {p.name for p in LOGS.iterdir()}
    assert files == {name for name, _ in PUBLISHED}
    sources = (REPO / "tests" / "data" / "logs" / "SOURCES.md").read_text()
    assert all(f"launcher-failures/{name}" in sources for name in files)


def test_reason_names_rank_host_signal_and_the_ranks_last_lines():
    text = (LOGS / "adda151_mpiexec_signal6_wrapped.log").read_text()
    logs = {0: ["step 10", "free(): invalid pointer"], 1: ["other rank"]}
    reason = failure_reason(134, text, lambda rank: logs[rank], ["job tail"])
    assert reason == ("rank 0 on host proton was killed by signal 6 (SIGABRT), as mpiexec reports; its log ends: "
                      "step 10 | free(): invalid pointer")
    # Open MPI's non-zero-status message names no host: a local run's host is this one.
    text = (LOGS / "scream1762_mpiexec_rank3_exit1.log").read_text()
    reason = failure_reason(1, text, lambda rank: [], [], local_host="n7")
    assert reason == "rank 3 on host n7 exited with code 1, as mpiexec reports; its log is empty"


def test_without_a_launcher_message_the_exit_code_says_the_signal():
    assert failure_reason(137, "no launcher here", lambda rank: [], ["a", "b", "last words"]) == \
        "exit code 137 (signal 9, SIGKILL): a | b | last words"
    assert exit_code_text(-15) == "exit code -15 (signal 15, SIGTERM)"
    assert exit_code_text(1) == "exit code 1" and failure_reason(1, "", lambda r: [], []) == "exit code 1: (no output)"
    assert launcher_failure("mpirun: command line ok\nall ranks fine\n") is None


def _real_dump(code: str) -> list[str]:
    """The stderr of a real Python process that enables its fault handler, as the harness does, and runs
    `code`, which kills it with a signal."""
    proc = subprocess.run([sys.executable, "-c", "import faulthandler, os, signal, sys\nfaulthandler.enable()\n" + code],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode < 0, proc.stderr
    return [line for line in proc.stderr.splitlines() if line.strip()]


def test_a_fault_handler_dump_is_quoted_by_its_last_words_error_and_frame():
    lines = _real_dump("import threading, time\n"
                       "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
                       "def destroy():\n"
                       "    sys.stderr.write('terminate called without an active exception\\n'); sys.stderr.flush()\n"
                       "    os.abort()\n"
                       "destroy()\n")
    assert lines[-1].startswith('  File "<string>", line 8 in <module>')  # the caller: not what happened
    assert log_ending(["step 1"] + lines) == ["terminate called without an active exception",
                                              "Fatal Python error: Aborted", 'in File "<string>", line 7 in destroy']
    # no dump: the last lines as they are
    assert log_ending(["a", "b", "c", "d"]) == ["b", "c", "d"] and log_ending([]) == []
    # another signal, nothing written before it
    lines = _real_dump("import atexit\natexit.register(lambda: os.kill(os.getpid(), signal.SIGSEGV))\n")
    assert log_ending(lines) == ["Fatal Python error: Segmentation fault", 'in File "<string>", line 4 in <lambda>']


@pytest.mark.mpi
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGABRT], ids=["SIGKILL", "SIGABRT"])
def test_a_killed_rank_of_a_real_mpirun_run(dlrun_home, signum):
    """Rank 1 of a real 2-rank run gets SIGKILL: the run is failed with rank 1, this host and SIGKILL. Or it
    gets SIGABRT, as a C++ runtime's abort sends it: the reason also quotes the Python frame it hit."""
    proc = subprocess.Popen([sys.executable, "-m", "dlrun.cli", "run", "trivial", "--ranks-per-node", "2",
                             "--steps", "1000000", "--warmup-steps", "1", "--batch-size", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        rank1 = None
        deadline = time.time() + 180
        while time.time() < deadline and rank1 is None and proc.poll() is None:
            for staging in (dlrun_home / "runs").glob(".staging-*"):
                if "images/sec" in _read(staging / "logs" / "1" / "rank.0" / "stdout"):
                    rank1 = _rank_pid(staging, 1)
            time.sleep(0.2)
        if rank1 is None:  # say why: the run ended (its own words), or what its ranks wrote so far
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            out, err = proc.communicate(timeout=120)
            logs = {str(p.relative_to(dlrun_home)): _read(p)[-500:] for p in (dlrun_home / "runs").rglob("std*")}
            pytest.fail(f"the run did not start training (exit {proc.returncode}): {out[-800:]}{err[-1500:]} {logs}")
        os.kill(rank1, signum)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # never leave a million-step run behind for the rest of the suite
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 1, out + err
    [run] = cli_json("results", "list")
    status = json.loads((Path(run["run_dir"]) / "status.json").read_text())
    assert run["status"] == "failed"
    killed = f"rank 1 on host {platform.node()} was killed by signal {int(signum)} ({signum.name})"
    assert status["reason"].startswith(f"{killed}, as mpirun reports; its log ")
    assert killed in err
    if signum == signal.SIGABRT:
        ending = status["reason"].split("; its log ends: ", 1)[1].split(" | ")
        assert ending[-2:-1] == ["Fatal Python error: Aborted"], status["reason"]
        assert re.fullmatch(r'in File ".+\.py", line \d+ in \S+', ending[-1]), status["reason"]


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _rank_pid(staging: Path, rank: int) -> int | None:
    """The rank's process: the one whose environment has this run directory and OMPI_COMM_WORLD_RANK."""
    wanted = [f"DLRUN_RUN_DIR={staging}".encode(), f"OMPI_COMM_WORLD_RANK={rank}".encode()]
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        if all(entry in environ for entry in wanted) and b"harness_pytorch.py" in cmdline:
            return int(name)
    return None
