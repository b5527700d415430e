"""No process of a job outlives its dlrun (the audit's break 3): dlrun is SIGKILLed while its job runs a process
tree (a grandchild that ignores SIGTERM, a double-forked daemon in a session of its own that dropped the run
directory from its environment, a stopped process; tests/audit_site.py), and within 5 s nothing of the job is
left, before any other dlrun command runs; the next one stores the run `lost`. And the job's keeper
(dlrun.execute.keeper) hands on the job's exit code and signal and leaves nothing behind when the job ends."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import audit_site
import pytest
from conftest import run_cli
from job_gate import wait_until

from dlrun.execute.procs import kept

#: The audit's bound: after SIGKILL of dlrun, no process of the job remains within this many seconds.
GONE_WITHIN_S = 5.0


def _pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.is_file() else []


def _gone_within(pids_of, seconds: float) -> tuple[list[int], float]:
    """(what is still alive, seconds waited): polls until nothing is alive or `seconds` have passed."""
    started = time.monotonic()
    while True:
        left = pids_of()
        waited = time.monotonic() - started
        if not left or waited > seconds:
            return left, waited
        time.sleep(0.02)


def _kill_all(pids: list[int]) -> None:
    for pid in audit_site.alive(pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.slow
@pytest.mark.parametrize("tree", sorted(audit_site.TREES))
def test_no_process_of_the_job_outlives_a_sigkilled_dlrun(dlrun_home, tmp_path, tree):
    _sigkill_dlrun_during(dlrun_home, tmp_path, tree, audit_site.TREES[tree][1])


@pytest.mark.mpi
def test_no_process_of_an_mpirun_job_outlives_a_sigkilled_dlrun(dlrun_home, tmp_path):
    """The same under mpirun: two ranks, each with a grandchild that ignores SIGTERM, below mpirun's own
    daemon (prted): the whole tree, mpirun's processes included, ends within the bound."""
    tree = "grandchild-ignoring-sigterm"
    _sigkill_dlrun_during(dlrun_home, tmp_path, tree, 2 * audit_site.TREES[tree][1], "--launcher", "mpirun",
                          "--ranks-per-node", "2")


def _descendants(pid: int) -> list[int]:
    """`pid` and every live process below it."""
    children: dict[int, list[int]] = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent = int(Path(f"/proc/{name}/stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return audit_site.alive(found)


def _sigkill_dlrun_during(dlrun_home: Path, tmp_path: Path, tree: str, expected: int, *extra: str) -> None:
    """Run the `tree` workload, SIGKILL dlrun once the tree's `expected` processes recorded themselves, and
    hold that every process of the job (its keeper and all below it, those that recorded their pids, and
    any carrying the run directory) is gone within GONE_WITHIN_S; the next command stores the run `lost`."""
    audit_site.install(tmp_path / "xdg-config", tmp_path / "scripts")
    pids_file = tmp_path / "pids"
    dlrun = subprocess.Popen([sys.executable, "-m", "dlrun.cli", "run", f"tree-{tree}", *extra],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "AUDIT_PIDS": str(pids_file)})
    recorded: list[int] = []
    try:
        wait_until(lambda: dlrun.poll() is not None or len(_pids(pids_file)) >= expected, "the job's tree")
        [staging] = (dlrun_home / "runs").glob(".staging-*")
        keeper = json.loads((staging / "job.json").read_text())["pid"]
        recorded = sorted({keeper, *_pids(pids_file), *_descendants(keeper)})
        assert set(_pids(pids_file)) <= set(audit_site.alive(recorded)), "the whole tree runs"
        assert len(_pids(pids_file)) == expected
        dlrun.kill()
        left, waited = _gone_within(
            lambda: sorted({*audit_site.alive(recorded), *audit_site.run_dir_processes(staging)}), GONE_WITHIN_S)
        print(f"\n{tree}: the job's last process ended {waited:.2f} s after dlrun's SIGKILL")
        assert left == [], f"{tree}: processes {left} outlived dlrun by {waited:.1f} s"
        dlrun.communicate(timeout=60)
        [run] = json.loads(run_cli("results", "list", "--json", check=True).stdout)
        assert run["status"] == "lost"
    finally:
        if dlrun.poll() is None:
            dlrun.kill()
        _kill_all(recorded + _pids(pids_file))


def _kept(script: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(kept(["bash", "-c", script]), capture_output=True, text=True, timeout=120,
                          start_new_session=True, **kwargs)


def test_the_keeper_hands_on_the_jobs_exit_code_and_signal():
    assert _kept("exit 3").returncode == 3
    assert _kept("echo out; echo err >&2").stdout == "out\n"
    assert _kept("kill -SEGV $$").returncode == -signal.SIGSEGV
    assert _kept("kill -KILL $$").returncode == -signal.SIGKILL
    assert _kept("kill -TERM $$").returncode == -signal.SIGTERM  # the keeper ignores SIGTERM; its job does not
    # the job starts with the signals a shell would give it: SIGPIPE and SIGXFSZ not ignored (Python ignores them)
    ignored = int(_kept("grep SigIgn /proc/self/status").stdout.split()[1], 16)
    assert ignored & (1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1)) == 0
    piped = _kept("yes | head -1")
    assert (piped.stdout, piped.stderr) == ("y\n", "")
    missing = subprocess.run(kept(["no-such-program-xyz"]), capture_output=True, text=True, timeout=60)
    assert missing.returncode == 127 and "dlrun: cannot run no-such-program-xyz" in missing.stderr


def test_the_keeper_ends_what_a_finished_job_left_behind(tmp_path):
    """A job that exits leaving a detached daemon that ignores SIGTERM: the keeper ends it before it exits, so
    that nothing of a job outlives it even without dlrun's own search."""
    pids = tmp_path / "pids"
    script = (f"(setsid sh -c 'echo $$ > {pids}; trap \"\" TERM; exec env -u DLRUN_RUN_DIR sleep 600' &); "
              f"while [ ! -s {pids} ]; do sleep 0.05; done; exit 0")
    try:
        proc = _kept(script)
        assert proc.returncode == 0, proc.stderr
        assert audit_site.alive(_pids(pids)) == []
    finally:
        _kill_all(_pids(pids))


def test_the_keeper_ends_its_job_when_its_parent_dies(tmp_path):
    """The keeper's parent (here a stand-in for dlrun) is SIGKILLed: the keeper ends the job, a process
    ignoring SIGTERM included, and leaves."""
    pids = tmp_path / "pids"
    parent_code = (f"import subprocess, sys, time; from dlrun.execute.procs import kept; "
                   f"p = subprocess.Popen(kept(['bash', '-c', \"echo $$ >> {pids}; "
                   f"sh -c 'echo $$ >> {pids}; trap \\\"\\\" TERM; exec sleep 600' & wait\"]), "
                   f"start_new_session=True); print(p.pid, flush=True); time.sleep(600)")
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    recorded: list[int] = []
    try:
        keeper = int(parent.stdout.readline())
        wait_until(lambda: len(_pids(pids)) >= 2, "the job's tree")
        recorded = [keeper, *_pids(pids)]
        parent.kill()
        left, waited = _gone_within(lambda: audit_site.alive(recorded), GONE_WITHIN_S)
        assert left == [], f"{left} outlived their parent by {waited:.1f} s"
    finally:
        parent.kill()
        parent.wait()
        _kill_all(recorded + _pids(pids))
