"""Why a job failed, in one line: which rank, on which host, of which signal or exit code, as the launcher
itself reported it (mpirun/mpiexec, srun, torchrun), plus the last lines of that rank's log.

The launchers' messages are matched as their users published them (tests/data/logs/launcher-failures); a
message may be wrapped over lines, so whitespace runs are folded first.
"""
from __future__ import annotations

import dataclasses
import re
import signal
from collections.abc import Callable

#: strsignal() text -> signal number, for launchers that print the text (`srun: error: n1: task 1: Killed`).
SIGNAL_TEXT = {signal.strsignal(sig).lower(): int(sig) for sig in signal.Signals
               if signal.strsignal(sig) and not signal.strsignal(sig).startswith(("Unknown", "Real-time"))}

OMPI_SIGNAL = re.compile(r"\b(?P<tool>mpirun|mpiexec|orterun|prterun) noticed that process rank (?P<rank>\d+) with "
                         r"PID \d+ on node (?P<host>\S+) exited on signal (?P<signal>\d+)")
OMPI_EXIT = re.compile(r"\b(?P<tool>mpirun|mpiexec|orterun|prterun) detected that one or more processes exited with "
                       r"non-zero status.{0,400}?Process name: \[\[\d+,\d+\],(?P<rank>\d+)\](?: Local host: (?P<host>\S+))?"
                       r" Exit code: (?P<code>-?\d+)")
# (`.*\S\s*$`, not `.+?\s*$`: a lazy match before `\s*$` retries the spaces of a long line at every character)
# (`\d+(?:[-,][-,\d]*)?`, not `\d+[-,\d]*`: two neighbours that both take digits split a long run every way)
SRUN_TASK = re.compile(r"^srun: error: (?P<host>[^\s:]+): tasks? (?P<rank>\d+)(?:[-,][-,\d]*)?: (?P<what>.*\S)\s*$",
                       re.MULTILINE)
SRUN_EXIT = re.compile(r"Exited with exit code (\d+)")
TORCHRUN_ROOT = re.compile(r"Root Cause \(first observed failure\): \[\d+\]: time ?: \S+ host ?: (?P<host>\S+) "
                           r"rank ?: (?P<rank>\d+)(?: \(local_rank: \d+\))? exitcode ?: (?P<code>-?\d+)")


@dataclasses.dataclass(frozen=True)
class RankFailure:
    """One rank's end as its launcher reported it."""

    launcher: str
    rank: int
    host: str | None
    signal: int | None = None
    exit_code: int | None = None
    detail: str | None = None  # the launcher's words when they name neither a signal nor an exit code

    def describe(self) -> str:
        where = f"rank {self.rank}" + (f" on host {self.host}" if self.host else "")
        if self.signal is not None:
            what = f"was killed by signal {self.signal} ({signal_label(self.signal)})"
        elif self.exit_code is not None:
            what = f"exited with code {self.exit_code}"
        else:
            what = f"ended: {self.detail}"
        return f"{where} {what}, as {self.launcher} reports"


def signal_label(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def launcher_failure(text: str) -> RankFailure | None:
    """The first failed rank a launcher reported in `text`, or None."""
    flat = " ".join(text.split())  # mpirun wraps its messages at 80 columns
    match = OMPI_SIGNAL.search(flat)
    if match:
        return RankFailure(match.group("tool"), int(match.group("rank")), match.group("host"),
                           signal=int(match.group("signal")))
    match = OMPI_EXIT.search(flat)
    if match:
        return RankFailure(match.group("tool"), int(match.group("rank")), match.group("host"),
                           exit_code=int(match.group("code")))
    match = SRUN_TASK.search(text)
    if match:
        rank, host, what = int(match.group("rank")), match.group("host"), match.group("what")
        code = SRUN_EXIT.match(what)
        if code:
            return RankFailure("srun", rank, host, exit_code=int(code.group(1)))
        signum = SIGNAL_TEXT.get(what.split(" (")[0].strip().lower())
        return RankFailure("srun", rank, host, signal=signum, detail=None if signum else what)
    match = TORCHRUN_ROOT.search(flat)
    if not match:
        return None
    rank, host = int(match.group("rank")), match.group("host")
    code = int(match.group("code"))  # torchrun: negative exit codes are signals
    return RankFailure("torchrun", rank, host, signal=-code if code < 0 else None,
                       exit_code=code if code >= 0 else None)


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
