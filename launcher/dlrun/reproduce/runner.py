"""Running the missing repeats of an experiment's points: one after another on this machine (each through
`dlrun.execute`, or counted in-process for model facts), or all submitted at once to a batch scheduler and
collected as they end. Every run is stored tagged with its experiment and point.

The order is round-robin over the points (every point's first repeat, then every point's second, ...), so
that a machine whose speed drifts during the experiment spreads the drift over all points rather than
putting it into the difference between two of them.

Interrupts: SIGINT while a local job runs ends it and records it cancelled (the executor does that); the
runner then stops, leaving every finished run stored. Under a batch scheduler, SIGINT cancels every job this
reproduce submitted at its scheduler; each is then collected and recorded cancelled.
"""
from __future__ import annotations

import re
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from dlrun.execute import Cleared, LineSink, RunRecord, execute
from dlrun.registry import SCHEDULERS
from dlrun.reproduce.model_facts import Describe, count_and_store
from dlrun.reproduce.resume import TaggedStore
from dlrun.reproduce.work import PointWork
from dlrun.schedulers.base import SchedulerError

#: The line the executor sends to the sink once a batch job is submitted: the job id to cancel on SIGINT.
SUBMITTED = re.compile(r"^dlrun: submitted (?P<scheduler>\S+) job (?P<job>\S+)")


@dataclass(frozen=True)
class Step:
    """One run to make: repeat `repeat` (of `work.repeats`) of a point; run `index` of `total` here."""

    work: PointWork
    repeat: int
    index: int
    total: int
    point_index: int   # k of `points`: the point's place among the points that run
    points: int


@dataclass
class StepOutcome:
    step: Step
    run_id: str
    status: str                     # ok | failed | cancelled (and whatever else the executor records)
    reason: str | None = None
    values: dict[str, float] = field(default_factory=dict)
    unit: str | None = None
    path: str | None = None
    tail: list[str] = field(default_factory=list)


@dataclass
class RunReport:
    outcomes: list[StepOutcome] = field(default_factory=list)
    interrupted: bool = False
    not_run: list[tuple[Step, str]] = field(default_factory=list)   # (step, why it was left out)

    def count(self, status: str) -> int:
        return sum(1 for outcome in self.outcomes if outcome.status == status)


class Progress(Protocol):
    """What the runner tells whoever shows its progress (the CLI's live display)."""

    def starting(self, step: Step) -> LineSink | None: ...

    def finished(self, outcome: StepOutcome) -> None: ...


def schedule(works: list[PointWork]) -> list[Step]:
    """The missing repeats, round-robin over the points."""
    running = [work for work in works if work.missing]
    place = {id(work): k for k, work in enumerate(running, start=1)}
    order = [(work, repeat) for repeat in range(1, max((w.repeats for w in running), default=0) + 1)
             for work in running if len(work.stored) < repeat <= work.repeats]
    return [Step(work, repeat, index, len(order), place[id(work)], len(running))
            for index, (work, repeat) in enumerate(order, start=1)]


def _outcome(step: Step, record: RunRecord) -> StepOutcome:
    result = record.result or {}
    values = {result["metric"]: float(result["value"])} if "metric" in result and record.status == "ok" else {}
    return StepOutcome(step, record.id, record.status, record.reason, values, result.get("unit"), str(record.path),
                       list(record.tail))


def _facts_outcome(step: Step, stored: dict[str, Any]) -> StepOutcome:
    return StepOutcome(step, stored["id"], "ok", values={r["metric"]: r["value"] for r in stored["results"]})


def run_local(steps: list[Step], *, store_path: Path, runs_root: Path, progress: Progress,
              describe: Describe | None = None, cleared: dict[str, Cleared] | None = None) -> RunReport:
    """Run the steps one after another. A point that fails is not repeated again in this reproduce.
    `cleared`: what the pre-run steps found for each point (by point id), stored with its runs."""
    report = RunReport()
    failed: set[str] = set()
    for position, step in enumerate(steps):
        work = step.work
        if work.id in failed:
            report.not_run.append((step, "an earlier repeat of this point failed"))
            continue
        try:
            sink = progress.starting(step)
            if work.facts is not None:
                if describe is None:
                    raise ValueError("model-facts points need a describe function (dlrun.harness.describe_model)")
                outcome = _facts_outcome(step, count_and_store(work, describe, store_path))
            else:
                assert work.plan is not None and work.rendered is not None
                record = execute(work.plan, work.rendered, runs_root=runs_root,
                                 store=TaggedStore(store_path, work.experiment, work.id), sink=sink,
                                 cleared=(cleared or {}).get(work.id))
                outcome = _outcome(step, record)
        except KeyboardInterrupt:  # between runs, or while counting: nothing is half-stored
            report.interrupted = True
            report.not_run += [(rest, "interrupted") for rest in steps[position:]]
            break
        report.outcomes.append(outcome)
        progress.finished(outcome)
        if outcome.status == "cancelled":
            report.interrupted = True
            report.not_run += [(rest, "interrupted") for rest in steps[position + 1:]]
            break
        if outcome.status != "ok":
            failed.add(work.id)
    return report


def run_batch(steps: list[Step], *, store_path: Path, runs_root: Path, progress: Progress,
              cleared: dict[str, Cleared] | None = None, poll_interval: float = 2.0) -> RunReport:
    """Submit every step to its batch scheduler at once, then collect each run as its job ends."""
    report = RunReport()

    def job(step: Step) -> BatchCall:
        def call(note: LineSink) -> RunRecord:
            work = step.work
            assert work.plan is not None and work.rendered is not None
            inner = progress.starting(step)

            def sink(stream: str, line: str) -> None:
                note(stream, line)
                if inner:
                    inner(stream, line)
            return execute(work.plan, work.rendered, runs_root=runs_root,
                           store=TaggedStore(store_path, work.experiment, work.id), sink=sink,
                           cleared=(cleared or {}).get(work.id), poll_interval=poll_interval)
        return call

    def finished(index: int, future: Future) -> None:
        outcome = _collected(steps[index], future)
        report.outcomes.append(outcome)
        progress.finished(outcome)

    report.interrupted = run_concurrently([job(step) for step in steps], finished)
    report.outcomes.sort(key=lambda outcome: outcome.step.index)
    return report


#: One batch job to run: given the sink its lines must also go to (where its job id is read), it executes the
#: job and returns the run's record.
BatchCall = Callable[[LineSink], RunRecord]


def run_concurrently(calls: list[BatchCall], finished: Callable[[int, Future], None]) -> bool:
    """Run every call in its own thread (each submits one batch job and follows it), `finished(index, future)`
    as each ends. SIGINT cancels every job submitted so far at its scheduler, again each second so that a job
    submitted after the first sweep is cancelled too; each is then collected and recorded cancelled by its
    executor. Returns whether it was interrupted."""
    jobs: dict[int, tuple[str, str]] = {}   # call index -> (scheduler, job id)
    cancelled: set[int] = set()
    lock = threading.Lock()
    interrupted = False

    def note_for(index: int) -> LineSink:
        def note(stream: str, line: str) -> None:
            submitted = SUBMITTED.match(line)
            if submitted:
                with lock:
                    jobs[index] = (submitted["scheduler"], submitted["job"])
        return note

    def cancel_all() -> None:
        with lock:
            todo = [(index, job) for index, job in jobs.items() if index not in cancelled]
            cancelled.update(index for index, _ in todo)
        for _, (scheduler, job_id) in todo:
            try:
                SCHEDULERS.get(scheduler).cancel(job_id)
            except SchedulerError:
                pass  # already gone: its executor records how it ended

    with ThreadPoolExecutor(max_workers=max(len(calls), 1), thread_name_prefix="dlrun-batch") as pool:
        pending = {pool.submit(call, note_for(index)): index for index, call in enumerate(calls)}
        while pending:
            try:
                done, _ = wait(list(pending), timeout=1.0, return_when=FIRST_COMPLETED)
            except KeyboardInterrupt:
                interrupted = True
                done = set()
            if interrupted:
                cancel_all()
            for future in done:
                finished(pending.pop(future), future)
    return interrupted


def _collected(step: Step, future: Future) -> StepOutcome:
    error = future.exception()
    if error is not None:
        return StepOutcome(step, "-", "failed", reason=f"{type(error).__name__}: {error}")
    return _outcome(step, future.result())



def is_batch(work: PointWork) -> bool:
    return work.plan is not None and SCHEDULERS.get(work.plan.scheduler).batch
