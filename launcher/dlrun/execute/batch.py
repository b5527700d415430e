"""Running a job through a batch scheduler: submit, follow its output, wait, collect, record.

SIGINT, SIGTERM or SIGHUP to dlrun cancels the job at its scheduler (scancel, bkill, qdel) and records the
run `cancelled` within CANCEL_WAIT_S; a dlrun that dies otherwise leaves `job.json` for recovery.
"""
from __future__ import annotations

import time
from pathlib import Path

from dlrun.execute.failure import failure_reason
from dlrun.execute.follow import Follower, LineSink, tail_lines
from dlrun.execute.local import rank_log_tail
from dlrun.execute.prerun import Cleared
from dlrun.execute.record import RunRecord, finish, parse_first
from dlrun.execute.signals import Interrupted, SignalGuard, signal_name
from dlrun.execute.stage import job_env, stage
from dlrun.job import JobState, RenderedJob
from dlrun.plan import Plan
from dlrun.registry import LAUNCHERS, SCHEDULERS
from dlrun.results.store import Store
from dlrun.schedulers.base import Scheduler, SchedulerError

#: After cancelling, how long dlrun waits for the scheduler to report the job ended before recording it.
CANCEL_WAIT_S = 8.0


def _cancel(scheduler: Scheduler, job_id: str, run_path: Path) -> JobState:
    state = JobState(state="cancelled")
    try:
        scheduler.cancel(job_id)
        deadline = time.monotonic() + CANCEL_WAIT_S
        while time.monotonic() < deadline:
            state = scheduler.poll(job_id, run_path)
            if state.done or state.state == "unknown":
                break
            time.sleep(0.5)
    except SchedulerError:
        pass
    return state


def batch_outcome(scheduler: str, time_limit: str | None, job_id: str, state: JobState,
                  texts: list[str]) -> tuple[str, str | None, int | None]:
    """(status, reason, exit code) of a batch job that ended on its own, from its scheduler's last word;
    ("failed", None, code) leaves the verdict to the exit code and the job's output."""
    exit_code = state.exit_code
    if state.state == "cancelled":
        return "cancelled", f"{scheduler} job {job_id} was cancelled ({state.raw})", exit_code
    if state.state == "timeout":
        return "timeout", f"{scheduler} job {job_id} hit its time limit ({time_limit}); see the rank logs", exit_code
    if state.state == "unknown" and exit_code is None:
        exit_code = 0 if parse_first(texts)[0] else None
        return "failed", None if exit_code == 0 else f"{scheduler} no longer knows job {job_id}", exit_code
    if state.state == "failed" and exit_code in (0, None):
        return "failed", f"{scheduler} job {job_id} {state.raw or state.state}", exit_code
    return "failed", None, exit_code


def execute_batch(plan: Plan, rendered: RenderedJob, *, runs_root: Path, store: Store, sink: LineSink | None = None,
                  cleared: Cleared | None = None, poll_interval: float = 2.0) -> RunRecord:
    """Submit to a batch scheduler, follow the job until it ends, collect its logs, record the run."""
    scheduler, launcher = SCHEDULERS.get(plan.scheduler), LAUNCHERS.get(plan.launcher)
    with SignalGuard() as guard:
        run, base_provenance, started = stage(plan, rendered, runs_root, cleared)
        try:
            job_id = scheduler.submit(rendered, run.path, job_env(run, plan))
        except (SchedulerError, OSError) as exc:
            return finish(plan, run, store, status="failed", reason=f"submission failed: {exc}", exit_code=None,
                          started=started, base_provenance=base_provenance, result_texts=[], tail=[],
                          failure=lambda: "")
        run.write_json("job.json", {"scheduler": plan.scheduler, "job_id": job_id, "submitted_at": time.time()})
        if sink:
            sink("stderr", f"dlrun: submitted {plan.scheduler} job {job_id} (run directory {run.path})")

        follower = Follower(sink)
        rank0 = run.path / rendered.rank_log_pattern.format(rank=0)

        def followed() -> list[tuple[Path, str]]:  # rank 0's own file, where the job's output lacks it
            paths = scheduler.output_files(job_id, run.path)
            paths += [rank0] if rank0 not in paths and not launcher.rank_output_in_job_log else []
            return [(path, "stdout") for path in paths]

        state, status, reason, signum = _follow(plan, scheduler, job_id, run.path, guard,
                                                lambda: follower.poll(followed()), poll_interval)
        follower.poll(followed(), final=True)

        outputs = scheduler.output_files(job_id, run.path)
        job_text = "\n".join(p.read_text(errors="replace") for p in outputs if p.is_file())
        run.write("output.log", job_text)
        rank0_text = rank0.read_text(errors="replace") if rank0.is_file() else ""
        exit_code = state.exit_code
        if status != "cancelled" and reason is None:
            status, reason, exit_code = batch_outcome(plan.scheduler, plan.scheduler_options.time, job_id, state,
                                                      [job_text, rank0_text])
        tail = tail_lines([*outputs, rank0])

        def failure() -> str:
            why = failure_reason(exit_code, job_text, rank_log_tail(run.path, rendered.rank_log_pattern), tail)
            return f"{plan.scheduler} job {job_id} {state.raw or state.state}: {why}"

        return finish(plan, run, store, status=status, reason=reason, exit_code=exit_code, started=started,
                      base_provenance=base_provenance, result_texts=[job_text, rank0_text], tail=tail,
                      failure=failure, extra={"job_id": job_id, "job_state": state.raw or state.state},
                      signal=signal_name(signum))


def _follow(plan: Plan, scheduler, job_id: str, path: Path, guard: SignalGuard, show, poll_interval: float):
    """Poll the job until it ends (showing its output as it grows), or cancel it on a signal:
    (its last state, status so far, reason or None, the signal number or None)."""
    status, reason, signum = "failed", None, None
    state = JobState(state="unknown")
    interval = min(0.5, poll_interval)
    try:
        with guard.armed():
            while True:
                state = scheduler.poll(job_id, path)
                show()
                if state.done or state.state == "unknown":
                    break
                time.sleep(interval)
                interval = min(interval * 1.5, poll_interval)
    except (Interrupted, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else 2
        state = _cancel(scheduler, job_id, path)
        status = "cancelled"
        reason = f"dlrun received {signal_name(signum)}; {plan.scheduler} job {job_id} was cancelled"
    except SchedulerError as exc:
        reason = f"lost track of {plan.scheduler} job {job_id}: {exc}"
    return state, status, reason, signum
