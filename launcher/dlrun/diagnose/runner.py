"""Running a diagnosis's probes: round after round, the jobs of a round at once (their nodes are disjoint),
each through `dlrun.execute` and stored tagged experiment `diagnose`, point its nodes; then each probe judged
against the baseline its key had when the diagnosis began."""
from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from dlrun.diagnose.verdict import Probe
from dlrun.execute import LineSink, RunRecord, execute
from dlrun.job import RenderedJob
from dlrun.plan import Plan
from dlrun.reproduce.resume import TaggedStore
from dlrun.reproduce.runner import run_concurrently
from dlrun.results.compare.history import DEFAULT_LAST, judge, key_history
from dlrun.results.store import Store
from dlrun.results.store.fields import STAMP_FORMAT

EXPERIMENT = "diagnose"


@dataclass(frozen=True)
class Job:
    """One probe to run: its nodes, and the plan and job that run it there (--nodelist)."""

    nodes: tuple[str, ...]
    plan: Plan
    rendered: RenderedJob


def _probe(job: Job, future: Future) -> Probe:
    error = future.exception()
    if error is not None:
        return Probe(job.nodes, "failed", reason=f"{type(error).__name__}: {error}")
    record: RunRecord = future.result()
    result = record.result or {}
    value = float(result["value"]) if record.status == "ok" and result.get("value") is not None else None
    return Probe(job.nodes, record.status, value, result.get("unit"), result.get("metric"), record.id,
                 record.reason)


def run_rounds(rounds: list[list[Job]], *, store_path: Path, runs_root: Path,
               finished: Callable[[Probe], None], poll_interval: float = 2.0) -> tuple[list[Probe], bool]:
    """Every round's jobs at once, one round after another; (the probes, whether SIGINT stopped it: the
    jobs then running are cancelled and recorded so, the later rounds are not run)."""
    probes: list[Probe] = []
    for jobs in rounds:
        def call(job: Job) -> Callable[[LineSink], RunRecord]:
            return lambda note: execute(job.plan, job.rendered, runs_root=runs_root,
                                        store=TaggedStore(store_path, EXPERIMENT, ",".join(job.nodes)), sink=note,
                                        poll_interval=poll_interval)

        ended: dict[int, Probe] = {}

        def done(index: int, future: Future, jobs: list[Job] = jobs) -> None:
            ended[index] = _probe(jobs[index], future)
            finished(ended[index])

        stopped = run_concurrently([call(job) for job in jobs], done)
        probes += [ended[index] for index in sorted(ended)]  # in the round's order, not the order they ended
        if stopped:
            return probes, True
    return probes, False


def stamp(now: float | None = None) -> str:
    """A store timestamp (the runs' created_at)."""
    return time.strftime(STAMP_FORMAT, time.gmtime(time.time() if now is None else now))


def with_baselines(probes: list[Probe], store: Store, *, before: str, last: int = DEFAULT_LAST,
                   tolerance: float = 0.05) -> list[Probe]:
    """Each measured probe with its verdict against the last `last` ok runs of its key stored before
    `before` (the diagnosis's own runs left out)."""
    own = frozenset(probe.run_id for probe in probes if probe.run_id)
    judged = []
    for probe in probes:
        if not probe.measured or not probe.run_id:
            judged.append(probe)
            continue
        stored = store.get_run(probe.run_id)
        past = key_history(store, stored["key_hash"], probe.unit or "", before=before, last=last, exclude=own)
        judged.append(replace(probe, baseline={**judge(probe.value, [v for _, v in past], tolerance, probe.metric),
                                               "history_n": len(past)}))  # type: ignore[arg-type]
    return judged
