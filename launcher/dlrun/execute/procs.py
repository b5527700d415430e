"""The processes of a local job, found and ended as a whole.

A job is started in a session of its own. Its process group is not enough to end it: Open MPI's mpirun puts
every rank in a process group of its own (same session), so signalling the job's group leaves the ranks
training. The job's processes are the members of its session plus every process whose environment carries
the job's run directory (`DLRUN_RUN_DIR`), which also finds ranks that started a session of their own.

The job's first process is its keeper (dlrun.execute.keeper): the subreaper of the job's whole tree, which
the kernel tells when dlrun dies (`PR_SET_PDEATHSIG`) and which then ends every process below it, so that a
SIGKILLed dlrun leaves nothing of its job running, whatever its process tree.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from dlrun.job import RUN_DIR_VAR

PROC = "/proc"
KEEPER = Path(__file__).with_name("keeper.py")
#: After dlrun dies, how long the job's processes have from SIGTERM to SIGKILL (all gone within 5 s).
DEATH_GRACE_S = 2.0
#: After the job's first process ends, how long what it left behind has from SIGTERM to SIGKILL.
LEFTOVER_GRACE_S = 5.0


def kept(argv: list[str]) -> list[str]:
    """`argv` run under the job's keeper (dlrun.execute.keeper: the job's subreaper, which ends the whole job
    when this process dies); elsewhere than Linux it runs as is."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    return [sys.executable, "-I", "-S", str(KEEPER), str(os.getpid()), str(LEFTOVER_GRACE_S), str(DEATH_GRACE_S),
            *argv]


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, session id) of a process, None when it is gone."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as handle:
            fields = handle.read().rpartition(b")")[2].split()
    except OSError:
        return None
    return fields[0].decode(), int(fields[3])


def _environ_has(pid: int, entry: bytes) -> bool:
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as handle:
            return entry in b"\0" + handle.read()
    except OSError:
        return False


def job_processes(session: int | None, run_dir: str) -> set[int]:
    """Live processes of the job: its session's members (while the session is still the job's: one of them
    carries the run directory) and every process whose environment carries the run directory."""
    entry = b"\0" + f"{RUN_DIR_VAR}={run_dir}".encode() + b"\0"
    marked: set[int] = set()
    members: set[int] = set()
    own = os.getpid()
    try:
        pids = [int(name) for name in os.listdir(PROC) if name.isdigit()]
    except OSError:
        return set()
    for pid in pids:
        if pid == own:
            continue
        found = _stat(pid)
        if found is None or found[0] in ("Z", "X"):
            continue
        if session is not None and found[1] == session:
            members.add(pid)
        if _environ_has(pid, entry):
            marked.add(pid)
    # A session id can be reused once all its members are gone; only trust it while the job is in it.
    return marked | members if marked & members or (session in members) else marked


def _signal_all(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            continue


def end_processes(find: Callable[[], set[int]], grace: float = 5.0, reap: Callable[[], object] | None = None) -> int:
    """End the processes `find` returns: SIGTERM (and SIGCONT, so that stopped ones receive it), then SIGKILL
    to what is left after `grace` seconds. `reap` collects dlrun's own child so that it does not linger as a
    zombie. Returns how many processes were signalled."""
    seen: set[int] = set()
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        pids = find()
        if not pids:
            break
        seen |= pids
        _signal_all(pids, sig)
        if sig == signal.SIGTERM:
            _signal_all(pids, signal.SIGCONT)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if reap is not None:
                reap()
            if not find():
                break
            time.sleep(0.05)
    if reap is not None:
        reap()
    return len(seen)
