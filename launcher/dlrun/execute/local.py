"""Running a job on this machine: in a session of its own, writing its output to files that dlrun follows,
held to the plan's time limit, and ended as a whole (every rank) when it times out or dlrun is signalled."""
from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path

from dlrun.execute.failure import failure_reason, log_ending
from dlrun.execute.follow import Follower, LineSink, tail_lines
from dlrun.execute.prerun import Cleared
from dlrun.execute.procs import end_processes, job_processes, kept
from dlrun.execute.record import RunRecord, finish
from dlrun.execute.rundir import RunDir
from dlrun.execute.signals import Interrupted, SignalGuard, signal_name
from dlrun.execute.stage import job_env, stage
from dlrun.execute.telemetry import sampling
from dlrun.job import RenderedJob
from dlrun.plan import Plan
from dlrun.registry import RUNTIMES
from dlrun.results.store import Store

POLL_S = 0.2
#: lines of a rank's log read for its ending: enough for a fault handler's dump of a few threads' stacks
DUMP_LINES = 400


class TimeLimitReached(Exception):
    pass


def _private(path: Path):
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w")


def _wait(proc: subprocess.Popen, follower: Follower, files: list[tuple[Path, str]], deadline: float | None) -> int:
    while True:
        code = proc.poll()
        follower.poll(files)
        if code is not None:
            return code
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeLimitReached
        time.sleep(POLL_S)


def rank_log_tail(run_path: Path, pattern: str):
    """rank -> the end of that rank's log (`log_ending`): its stderr when it wrote any, else its stdout."""
    def tail(rank: int) -> list[str]:
        log = run_path / pattern.format(rank=rank)
        for path in ([log.with_name("stderr"), log] if log.name == "stdout" else [log]):
            lines = tail_lines([path], DUMP_LINES)
            if lines:
                return log_ending(lines)
        return []
    return tail


def execute_local(plan: Plan, rendered: RenderedJob, *, runs_root: Path, store: Store,
                  sink: LineSink | None = None, cleared: Cleared | None = None) -> RunRecord:
    with SignalGuard() as guard:
        run, base_provenance, started = stage(plan, rendered, runs_root, cleared)
        out_path, err_path = run.path / "output.log", run.path / "stderr.log"
        files = [(out_path, "stdout"), (err_path, "stderr")]
        follower = Follower(sink)
        limit = plan.scheduler_options.time_seconds()
        with sampling(plan, run.path):
            exit_code, status, reason, signum = _run_job(plan, rendered, run, guard, follower, files, limit)
        follower.poll(files, final=True)

        if rendered.rank_log_pattern == "logs/rank.0/stdout":
            rank_dir = run.path / "logs" / "rank.0"
            rank_dir.mkdir(parents=True, exist_ok=True)
            os.link(out_path, rank_dir / "stdout")
            os.link(err_path, rank_dir / "stderr")
        output = out_path.read_text(errors="replace")
        tail = tail_lines([err_path]) or tail_lines([out_path])

        def failure() -> str:
            return failure_reason(exit_code, output + "\n" + err_path.read_text(errors="replace"),
                                  rank_log_tail(run.path, rendered.rank_log_pattern), tail, platform.node())

        return finish(plan, run, store, status=status, reason=reason, exit_code=exit_code, started=started,
                      base_provenance=base_provenance, result_texts=[output], tail=tail, failure=failure,
                      signal=signal_name(signum))


def _remove_leftovers(plan: Plan, run: RunDir) -> None:
    """What the ranks' engine service still holds for this run (a container whose `docker run` was killed)."""
    argv = RUNTIMES.get(plan.runtime).leftover_cleanup(str(run.path))
    if argv:
        try:
            subprocess.run(argv, env=job_env(run, plan), stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            pass  # the engine is gone or stuck: nothing of this run can be removed through it


def _run_job(plan: Plan, rendered: RenderedJob, run: RunDir, guard: SignalGuard, follower: Follower,
             files: list[tuple[Path, str]], limit: int | None) -> tuple[int | None, str, str | None, int | None]:
    """Run the job to its end (or its time limit, or a signal to dlrun); end every process it left.
    (exit code, status, reason, signal number)."""
    status, reason, exit_code, signum = "failed", None, None, None
    (out_path, _), (err_path, _) = files
    proc = None
    try:
        with guard.armed():
            with _private(out_path) as out, _private(err_path) as err:
                proc = subprocess.Popen(kept(rendered.submit_argv), cwd=run.path,
                                        env=job_env(run, plan), stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=err, start_new_session=True)
            run.write_json("job.json", {"pid": proc.pid, "session": proc.pid, "host": platform.node(),
                                        "started_at": time.time()})
            deadline = None if limit is None else time.monotonic() + limit
            exit_code = _wait(proc, follower, files, deadline)
    except (Interrupted, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else 2
        status, reason = "cancelled", f"dlrun received {signal_name(signum)}; the job was ended"
    except TimeLimitReached:
        status = "timeout"
        reason = f"the time limit of {limit} s (--time {plan.scheduler_options.time}) was reached; the job was ended"
    if proc is not None:
        # Every process of the job, also those a finished job left behind (a rank that daemonized).
        end_processes(lambda: job_processes(proc.pid, str(run.path)), reap=proc.poll)
        _remove_leftovers(plan, run)
        if exit_code is None:
            try:
                exit_code = proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # stuck in the kernel (uninterruptible I/O): record what we know
                exit_code = None
    return exit_code, status, reason, signum
