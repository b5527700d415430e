"""The stored runs of an experiment's points through `dlrun compare`: speedup and scaling efficiency with
confidence intervals where the points sweep a device count, statistics per configuration otherwise.

The points are grouped by their axis values other than the device counts and the model (compare's scaling
mode gives each model its own rows), so that a mixed-precision experiment gets one table per precision and
batch size instead of a refusal for mixing them, and one over a system's partitions a table per partition (its
nodes are another machine; a derived reference sets one partition's points against another's). Model-facts
points are not runs compare reads.
"""
from __future__ import annotations

from dlrun.catalog.experiment_vocabulary import WORKLOAD_AXES
from dlrun.catalog.experiments import ExperimentSpec
from dlrun.reproduce.work import PointWork
from dlrun.results.compare import Comparison, FactsProvider, compare
from dlrun.results.store.query import Filters
from dlrun.results.store import Store

#: Axes that set how many devices a point runs on: compare's `devices` axis.
DEVICE_AXES = ("gpus", "nodes", "ranks_per_node", "cpu_cores")


def compare_points(store: Store, experiment: ExperimentSpec, works: list[PointWork],
                   facts: FactsProvider | None = None) -> list[Comparison]:
    """One comparison per group of points that differ only in device count and model; a comparison that is
    not like-for-like (repeats that differ, e.g. in framework version) is made anyway and says so."""
    groups: dict[tuple, list[PointWork]] = {}
    for work in works:
        if work.plan is None or not work.stored:
            continue
        label = tuple((name, value.paper) for name, value in work.point.values.items()
                      if name not in DEVICE_AXES and name not in WORKLOAD_AXES)
        groups.setdefault(label, []).append(work)
    comparisons = []
    for label, members in groups.items():
        run_ids = tuple(run.id for work in members for run in work.stored)
        scaling = len({work.plan.world_size for work in members if work.plan is not None}) > 1
        result = compare(store, Filters(run_ids=run_ids), mode="scaling" if scaling else "summary",
                         by="devices" if scaling else None, allow_mismatch=True, facts=facts)
        where = ", ".join(f"{name}={value}" for name, value in label)
        result.title = f"{experiment.id}: {result.title}" + (f" ({where})" if where else "")
        comparisons.append(result)
    return comparisons
