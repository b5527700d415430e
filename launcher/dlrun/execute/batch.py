"""Running a job through a batch scheduler: submit, follow its output, wait, collect, record."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from dlrun.execute.local import LineSink
from dlrun.execute.record import RunRecord, finish, parse_first
from dlrun.execute.stage import job_env, stage
from dlrun.job import JobState, RenderedJob
from dlrun.plan import Plan
from dlrun.registry import SCHEDULERS
from dlrun.results.store import Store
from dlrun.schedulers.base import SchedulerError


class _Follower:
    """Streams new lines of growing files to the sink (the job's output, rank 0's log)."""

    def __init__(self, sink: LineSink | None):
        self.sink = sink
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, str] = {}

    def poll(self, paths: list[Path], final: bool = False) -> None:
        for path in paths:
            try:
                with open(path, errors="replace") as handle:
                    handle.seek(self.offsets.get(path, 0))
                    chunk = handle.read()
                    self.offsets[path] = handle.tell()
            except OSError:
                continue
            text = self.partial.pop(path, "") + chunk
            lines = text.split("\n")
            if not final:
                self.partial[path] = lines.pop()
            for line in lines:
                if line and self.sink:
                    self.sink("stdout", line)


def _tail_lines(paths: list[Path], count: int = 40) -> list[str]:
    lines: list[str] = []
    for path in paths:
        try:
            lines += [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            continue
    return lines[-count:]


def execute_batch(plan: Plan, rendered: RenderedJob, *, runs_root: Path, store: Store, sink: LineSink | None = None,
                  inventory: dict[str, Any] | None = None, findings: list[Any] | None = None,
                  poll_interval: float = 2.0, cancel_grace: float = 120.0) -> RunRecord:
    """Submit to a batch scheduler, follow the job until it ends, collect its logs, record the run.
    SIGINT (KeyboardInterrupt) cancels the job and records the run as cancelled."""
    scheduler = SCHEDULERS.get(plan.scheduler)
    run, env_capture, started = stage(plan, rendered, runs_root, inventory, findings)
    env = job_env(run)
    try:
        job_id = scheduler.submit(rendered, run.path, env)
    except (SchedulerError, OSError) as exc:
        return finish(plan, rendered, run, store, status="failed", reason=f"submission failed: {exc}",
                       exit_code=None, started=started, env_capture=env_capture, result_texts=[], tail=[])
    run.write_json("job.json", {"scheduler": plan.scheduler, "job_id": job_id, "submitted_at": time.time()})
    if sink:
        sink("stderr", f"dlrun: submitted {plan.scheduler} job {job_id} (run directory {run.path})")

    follower = _Follower(sink)
    rank0 = run.path / rendered.rank_log_pattern.format(rank=0)

    def followed() -> list[Path]:
        paths = scheduler.output_files(job_id, run.path)
        return paths + ([rank0] if rank0 not in paths and plan.launcher == "srun" else [])

    status, reason = "failed", None
    state = JobState(state="unknown")
    interval = min(0.5, poll_interval)
    try:
        while True:
            state = scheduler.poll(job_id, run.path)
            follower.poll(followed())
            if state.done or state.state == "unknown":
                break
            time.sleep(interval)
            interval = min(interval * 1.5, poll_interval)
    except KeyboardInterrupt:
        status, reason = "cancelled", f"interrupted by the user (SIGINT); {plan.scheduler} job {job_id} cancelled"
        deadline = time.time() + cancel_grace
        try:
            scheduler.cancel(job_id)
            while time.time() < deadline:  # until the scheduler has really ended it (files closed)
                try:
                    state = scheduler.poll(job_id, run.path)
                except SchedulerError:
                    break
                if state.done or state.state == "unknown":
                    break
                time.sleep(0.5)
        except KeyboardInterrupt:  # a second Ctrl-C: record what we have, do not leave a staging directory
            scheduler.cancel(job_id)
    except SchedulerError as exc:
        reason = f"lost track of {plan.scheduler} job {job_id}: {exc}"
    follower.poll(followed(), final=True)

    outputs = scheduler.output_files(job_id, run.path)
    job_text = "\n".join(p.read_text(errors="replace") for p in outputs if p.is_file())
    run.write("output.log", job_text)
    rank0_text = rank0.read_text(errors="replace") if rank0.is_file() else ""
    exit_code = state.exit_code
    if status != "cancelled":
        if state.state == "cancelled":
            status, reason = "cancelled", f"{plan.scheduler} job {job_id} was cancelled ({state.raw})"
        elif state.state == "timeout":
            reason = (f"{plan.scheduler} job {job_id} hit its time limit "
                      f"({plan.scheduler_options.time}); see the rank logs")
        elif state.state == "unknown" and exit_code is None:
            exit_code = 0 if parse_first([job_text, rank0_text])[0] else None
            reason = None if exit_code == 0 else f"{plan.scheduler} no longer knows job {job_id}"
        elif exit_code not in (0, None) or state.state == "failed":
            last = (_tail_lines([*outputs, run.path / rendered.rank_log_pattern.format(rank=0).replace(
                "stdout", "stderr")]) or ["(no output)"])[-1]
            reason = f"{plan.scheduler} job {job_id} {state.raw or state.state} (exit code {exit_code}): {last}"
    tail = _tail_lines([*outputs, rank0])
    return finish(plan, rendered, run, store, status=status, reason=reason, exit_code=exit_code, started=started,
                   env_capture=env_capture, result_texts=[job_text, rank0_text], tail=tail,
                   extra={"job_id": job_id, "job_state": state.raw or state.state})
