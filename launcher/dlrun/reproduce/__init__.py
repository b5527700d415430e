"""`dlrun reproduce`: an experiment's matrix expanded for a system, each point planned and rendered, the
repeats the store lacks run (or submitted and collected), every run stored tagged with its experiment and
point, and the results set against the experiment's published numbers.

    prepare(...)          -> the selected points of each system, planned, with what the store holds
    schedule(works)       -> the missing repeats, round-robin over the points
    run_local / run_batch -> run them (dlrun.execute; model facts in-process), stop cleanly on SIGINT
    compare_references    -> published against measured, for the references a point answers directly
    compare_points        -> the stored runs through `dlrun compare` (scaling with confidence intervals)

Printing is the CLI's (`dlrun.cli.reproduce`); nothing here writes to the terminal.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dlrun.catalog import Catalog
from dlrun.catalog.experiments import ExperimentSpec
from dlrun.plan import LocalImage
from dlrun.reproduce.comparisons import compare_points
from dlrun.reproduce.references import ReferenceRow, compare_references
from dlrun.reproduce.resume import TaggedStore, planned_key, same_point, stored_repeats, stored_runs
from dlrun.reproduce.runner import RunReport, Step, StepOutcome, is_batch, run_batch, run_local, schedule
from dlrun.reproduce.select import check_repeats, choose_systems, parse_where
from dlrun.reproduce.work import PointWork, plan_points, point_id
from dlrun.results.compare.stats import geometric_mean
from dlrun.results.store import Store

__all__ = ["PointWork", "ReferenceRow", "RunReport", "Step", "StepOutcome", "SystemWork", "TaggedStore",
           "compare_points", "compare_references", "is_batch", "planned_key", "point_id", "point_summary", "prepare", "run_batch",
           "run_local", "same_point", "schedule", "stored_repeats", "stored_runs"]


@dataclass
class SystemWork:
    """The selected points of an experiment on one system (None: model facts, on no system)."""

    system: str | None
    works: list[PointWork]

    @property
    def runnable(self) -> list[PointWork]:
        return [work for work in self.works if work.skip is None]

    @property
    def skipped(self) -> list[PointWork]:
        return [work for work in self.works if work.skip is not None]

    @property
    def missing(self) -> int:
        return sum(work.missing for work in self.works)


def prepare(catalog: Catalog, experiment: str, *, system: str | None, where: Sequence[str] = (),
            repeats: int | None = None, dry_run: bool, local_image: LocalImage | None,
            store: Store) -> tuple[ExperimentSpec, list[SystemWork]]:
    """The experiment and, for each system it is reproduced on, its selected points planned and rendered.
    Every bad name or value is a UsageError before anything is planned."""
    spec = catalog.experiment(experiment)
    check_repeats(repeats)
    systems = choose_systems(spec, system, dry_run=dry_run)
    conditions = parse_where(spec, where)
    return spec, [SystemWork(name, plan_points(catalog, spec, name, where=conditions, repeats=repeats,
                                               local_image=local_image, store=store)) for name in systems]


def point_summary(work: PointWork) -> dict[str, Any]:
    """What the store holds of a point: runs, and per metric their geometric mean (of the positive values:
    a rate or a count), lowest and highest value."""
    metrics: dict[str, list[float]] = {}
    units: dict[str, str] = {}
    for run in work.stored:
        for metric, value in run.values.items():
            metrics.setdefault(metric, []).append(value)
            units[metric] = run.units.get(metric, "")
    return {"point": work.id, "runs": len(work.stored), "repeats": work.repeats,
            "run_ids": [run.id for run in work.stored],
            "metrics": {metric: {"geomean": _geomean(values), "min": min(values), "max": max(values),
                                 "n": len(values), "unit": units[metric]} for metric, values in metrics.items()}}


def _geomean(values: list[float]) -> float | None:
    positive = [v for v in values if 0 < v < math.inf]
    return geometric_mean(positive) if positive else None
