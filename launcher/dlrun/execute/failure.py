"""Why a job failed, in one line: which rank, on which host, of which signal or exit code, as the launcher
itself reported it, plus the last lines of that rank's log.

Each launcher reads its own reports (`Launcher.rank_failure`); a job's output may hold another launcher's
(horovodrun prints mpirun's, a torchrun started by srun both), so every launcher is asked, in name order:
the first report found names the rank.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from dlrun.job import RankFailure, signal_label
from dlrun.registry import LAUNCHERS

__all__ = ["RankFailure", "exit_code_text", "failure_reason", "launcher_failure", "log_ending", "signal_label"]

#: how Python's fault handler (the harnesses enable it) starts the stacks it dumps on a fatal signal
FATAL_PYTHON = "Fatal Python error: "


def launcher_failure(text: str) -> RankFailure | None:
    """The first failed rank a launcher reported in `text`, or None."""
    for launcher in LAUNCHERS.available().values():
        failure = launcher.rank_failure(text)
        if failure is not None:
            return failure
    return None


def log_ending(lines: list[str], count: int = 3) -> list[str]:
    """The end of a rank's log as a failure reason quotes it: its last `count` lines; but where Python's fault
    handler dumped the stacks of a process killed by a signal, the line before the dump (a C++ runtime's own
    last words, e.g. `terminate called without an active exception`), the dump's error line and the frame the
    signal hit in the current thread - the dump's last lines are only that frame's callers and the list of
    extension modules."""
    starts = [i for i, line in enumerate(lines) if line.startswith(FATAL_PYTHON)]
    if not starts:
        return lines[-count:]
    start = starts[-1]
    dump = lines[start:]
    current = next((i for i, line in enumerate(dump) if line.startswith("Current thread")), None)
    frame = dump[current + 1].strip() if current is not None and current + 1 < len(dump) else None
    return lines[max(start - 1, 0):start] + [dump[0]] + ([f"in {frame}"] if frame else [])


def exit_code_text(code: int | None) -> str:
    """`exit code 137 (signal 9, SIGKILL)`: shells report a signal N as 128 + N, Python's Popen as -N."""
    if code is None:
        return "no exit code"
    signum = -code if code < 0 else code - 128 if 128 < code < 128 + 65 else None
    return f"exit code {code}" + (f" (signal {signum}, {signal_label(signum)})" if signum else "")


def failure_reason(exit_code: int | None, launcher_text: str, rank_log_tail: Callable[[int], list[str]],
                   job_tail: list[str], local_host: str | None = None, lines: int = 3) -> str:
    """One line: the failed rank as the launcher reported it and the end of its log; without a launcher
    message, the job's exit code and the end of its output."""
    failure = launcher_failure(launcher_text)
    if failure is None:
        return f"{exit_code_text(exit_code)}: " + " | ".join(job_tail[-lines:] or ["(no output)"])
    if failure.host is None and local_host:
        failure = dataclasses.replace(failure, host=local_host)
    tail = rank_log_tail(failure.rank)[-lines:]
    return failure.describe() + (f"; its log ends: {' | '.join(tail)}" if tail else "; its log is empty")
