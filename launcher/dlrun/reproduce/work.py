"""An experiment's points on one system, each resolved into what it will run: a plan and its rendered job (or,
for model facts, the model to count), how often, what the store already holds of it, or why it cannot run."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlrun.catalog import Catalog
from dlrun.catalog.experiment_points import Point, expand, matches
from dlrun.catalog.experiments import Conditions, ExperimentSpec
from dlrun.errors import UsageError
from dlrun.job import RenderedJob
from dlrun.paths import HARNESS_DIR, harness_hashes
from dlrun.measure import matmul_ceiling
from dlrun.plan import LocalImage, Plan, SiteInputs, resolve_plan
from dlrun.render import render_job
from dlrun.reproduce.resume import MODEL_FACTS, Key, StoredRun, facts_key, planned_key, stored_runs
from dlrun.results.store import Store

#: The harness whose model definitions model facts are counted on.
FACTS_FRAMEWORK = "pytorch"


def point_id(point: Point) -> str:
    """A point's id within its experiment: its axis values as the paper wrote them (`model=ResNet50 gpus=8`).
    Stable while the experiment's axes keep their values, unlike the point's index."""
    return point.label()


@dataclass
class PointWork:
    experiment: str
    point: Point
    id: str
    repeats: int                       # wanted in the store
    plan: Plan | None = None           # training and collective points
    rendered: RenderedJob | None = None
    facts: dict[str, Any] | None = None  # model-facts points: the plan record of the count
    key: Key | None = None
    skip: str | None = None
    stored: list[StoredRun] = field(default_factory=list)

    @property
    def system(self) -> str | None:
        return self.point.system

    @property
    def missing(self) -> int:
        """Repeats still to run."""
        return 0 if self.skip else max(self.repeats - len(self.stored), 0)

    def refresh(self, store: Store) -> None:
        """Read what the store holds of this point (again)."""
        if self.key is not None:
            self.stored = stored_runs(store, self.experiment, self.id, self.key)


def facts_record_plan(workload: str, model: str) -> dict[str, Any]:
    """The plan record of a model-facts run: which model, counted by which harness (its files' digest, as a
    run's provenance names the harness it ran)."""
    digest, per_file = harness_hashes(HARNESS_DIR, FACTS_FRAMEWORK)
    return {"kind": MODEL_FACTS, "workload": workload, "model": model, "harness": f"harness_{FACTS_FRAMEWORK}",
            "harness_sha256": digest, "harness_files_sha256": per_file}


def plan_points(catalog: Catalog, experiment: ExperimentSpec, system: str | None, *, where: Conditions,
                repeats: int | None, local_image: LocalImage | None, store: Store) -> list[PointWork]:
    """The points of `experiment` on `system` that `where` selects, each planned and rendered, or skipped
    with the reason; with what `store` already holds of each."""
    spec = catalog.system(system) if system is not None else None
    points = [point for point in expand(experiment, spec, catalog.workloads, catalog.images)
              if matches(where, point.values, system)]
    site = SiteInputs(local_image=local_image, matmul_ceiling=lambda name, dtype: matmul_ceiling(store, name, dtype))
    works = []
    for point in points:
        work = PointWork(experiment.id, point, point_id(point), repeats or point.repeats, skip=point.skip)
        if work.skip is None and point.workload is not None:
            if experiment.measure == "model-facts":
                _count(catalog, work, point.workload)
            else:
                _plan(catalog, work, point, site)
        work.refresh(store)
        works.append(work)
    return works


def _count(catalog: Catalog, work: PointWork, workload: str) -> None:
    model = catalog.workload(workload).model
    if model is None:
        work.skip = f"workload {workload!r} trains no model: it has no parameters to count"
        return
    work.facts = facts_record_plan(workload, model)
    work.key = facts_key(work.facts)


def _plan(catalog: Catalog, work: PointWork, point: Point, site: SiteInputs) -> None:
    try:
        # an experiment's points run the defaults, untuned; an LLM's MFU against the store's ceiling
        work.plan = resolve_plan(catalog, str(point.workload), site=site, **point.plan_options())
    except UsageError as exc:  # the expansion let through what the plan refuses: say so, run the rest
        work.skip = f"dlrun cannot plan it: {exc}"
        return
    work.rendered = render_job(work.plan)
    work.key = planned_key(work.plan)
