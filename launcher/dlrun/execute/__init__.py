"""Execute a rendered job: stage its run directory, run it here or submit it to a batch scheduler and wait,
record the run and store its results; recover the runs of a dlrun that died (dlrun.execute.recovery)."""
from __future__ import annotations

from pathlib import Path

from dlrun.execute.batch import execute_batch
from dlrun.execute.follow import LineSink
from dlrun.execute.local import execute_local
from dlrun.execute.prerun import Cleared
from dlrun.execute.record import RunRecord
from dlrun.job import RenderedJob
from dlrun.plan import Plan
from dlrun.registry import SCHEDULERS
from dlrun.results.store import Store

__all__ = ["Cleared", "LineSink", "RunRecord", "execute", "execute_batch", "execute_local"]


def execute(plan: Plan, rendered: RenderedJob, *, runs_root: Path, store: Store, sink: LineSink | None = None,
            cleared: Cleared | None = None, poll_interval: float = 2.0) -> RunRecord:
    """Run the job the way its scheduler runs jobs: locally, or submitted and waited for. `cleared`: what
    the pre-run steps found (dlrun.execute.prerun), stored with the run."""
    scheduler = SCHEDULERS.get(plan.scheduler)
    if scheduler.batch:
        return execute_batch(plan, rendered, runs_root=runs_root, store=store, sink=sink, cleared=cleared,
                             poll_interval=poll_interval)
    return execute_local(plan, rendered, runs_root=runs_root, store=store, sink=sink, cleared=cleared)
