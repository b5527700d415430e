"""Execute a rendered job: stage its run directory, run it here or submit it to a batch scheduler and wait,
record the run and store its results; recover the runs of a dlrun that died (dlrun.execute.recovery)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from dlrun.execute.batch import execute_batch
from dlrun.execute.follow import LineSink
from dlrun.execute.local import execute_local
from dlrun.execute.record import RunRecord
from dlrun.job import RenderedJob
from dlrun.plan import Plan
from dlrun.registry import SCHEDULERS
from dlrun.results.store import Store

__all__ = ["LineSink", "RunRecord", "execute", "execute_batch", "execute_local"]


def execute(plan: Plan, rendered: RenderedJob, *, runs_root: Path, store: Store, sink: LineSink | None = None,
            inventory: dict[str, Any] | None = None, findings: list[Any] | None = None,
            poll_interval: float = 2.0) -> RunRecord:
    """Run the job the way its scheduler runs jobs: locally, or submitted and waited for."""
    scheduler = SCHEDULERS.get(plan.scheduler)
    if scheduler.batch:
        return execute_batch(plan, rendered, runs_root=runs_root, store=store, sink=sink, inventory=inventory,
                             findings=findings, poll_interval=poll_interval)
    return execute_local(plan, rendered, runs_root=runs_root, store=store, sink=sink, inventory=inventory,
                         findings=findings)
