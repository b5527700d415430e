"""Which point of an experiment an imported log is a run of (`dlrun results import-log ... --experiment E`).

The point is the one whose plan is the log's plan (workload, image, system, nodes, ranks, batch, precision,
the fabric across several nodes, and tf_cnn_benchmarks' settings) and whose planned key the log's key matches as `dlrun reproduce`
matches its own runs (dlrun.reproduce.resume.same_point). A log that fits no point, or several, is refused
with the points there are: a tag is a claim that the run reproduces that point.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dlrun.catalog import Catalog
from dlrun.errors import UsageError
from dlrun.plan import LocalImage, Plan
from dlrun.reproduce.resume import same_point
from dlrun.results.key import KEY_FIELDS, UNKNOWN
from dlrun.reproduce.work import plan_points
from dlrun.reproduce.select import choose_systems
from dlrun.results.store import Store

#: The plan fields that tell an experiment's points apart (besides the key).
POINT_FIELDS = ("nodes", "ranks_per_node", "precision", "variable_update", "all_reduce_spec", "parameter_servers",
                "data_format")
SHOWN = 8


def _identity(plan: Plan) -> tuple[Any, ...]:
    batch = plan.batch_size if plan.workload.trains else None
    fabric = plan.fabric if plan.nodes > 1 else None  # on one node no traffic crosses it
    return (plan.workload.name, plan.image.name, plan.system.name, batch, fabric,
            *(getattr(plan, name) for name in POINT_FIELDS))


def point_of(catalog: Catalog, experiment: str, plan: Plan, key: Mapping[str, Any], *, store: Store,
             local_image: LocalImage | None = None) -> str:
    """The id of the point of `experiment` that `plan` (with its stored `key`) is a run of."""
    spec = catalog.experiment(experiment)
    if spec.measure == "model-facts":
        raise UsageError(f"experiment {spec.id} counts model facts, which no log holds; valid: an experiment that "
                         "measures training or collectives")
    choose_systems(spec, plan.system.name, dry_run=True)  # the system must be one the experiment ran on
    works = [work for work in plan_points(catalog, spec, plan.system.name, where={}, repeats=None,
                                          local_image=local_image, store=store)
             if work.plan is not None and work.key is not None]
    alike = [work for work in works if _identity(work.plan) == _identity(plan)]
    matches = [work for work in alike if same_point(work.key, key)]
    if len(matches) == 1:
        return matches[0].id
    if matches:
        raise UsageError(f"the log fits {len(matches)} points of experiment {spec.id} ("
                         + "; ".join(work.id for work in matches[:SHOWN]) + "); it can count for one only")
    if alike:  # planned the same way, but what ran differs (another code, framework version or image build)
        differ = [f"{label}: {alike[0].key[name]} planned, {key.get(name)} in the log"
                  for name, label in KEY_FIELDS.items()
                  if alike[0].key.get(name) not in (UNKNOWN, key.get(name)) and name != "precision"]
        raise UsageError(f"the log is no run of point {alike[0].id} of experiment {spec.id}: " + "; ".join(differ))
    listed = [f"{work.id} ({_describe(work.plan)})" for work in works[:SHOWN]]
    more = f" and {len(works) - SHOWN} more (dlrun reproduce {spec.id} --dry-run)" if len(works) > SHOWN else ""
    raise UsageError(f"the log ({_describe(plan)}) is no point of experiment {spec.id} on system "
                     f"{plan.system.name!r}; valid: " + ("; ".join(listed) + more if listed else "none: the "
                                                         "experiment plans no point there"))


def _describe(plan: Plan) -> str:
    batch = f", batch {plan.batch_size}" if plan.workload.trains else ""
    return (f"{plan.workload.name}, image {plan.image.name}, {plan.nodes} x {plan.ranks_per_node} ranks{batch}, "
            f"{plan.precision}, {plan.fabric}")
