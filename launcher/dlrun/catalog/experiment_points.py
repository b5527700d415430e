"""Expand an experiment's matrix into points (one dlrun run each) for one system.

Pure: catalog data in, points out. A point is skipped, with the reason, when catalog data alone says it
cannot run there: the experiment's status, an axis value dlrun has no setting for, a workload that does not
exist yet, an image not built for the system's architecture (or one that runs tf_cnn_benchmarks for a model
it lacks), too few GPUs or nodes, a missing fabric, or a precision the GPU has no fast units for. A point of a
`partition` axis is placed on that partition's nodes (`dlrun.catalog.partitions.select`, as `--partition` plans
them); a partition the system does not model is refused, naming the valid ones.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dlrun.catalog.experiment_vocabulary import COUNT_AXES, WORKLOAD_AXES
from dlrun.catalog.experiments import AxisValue, Conditions, ExperimentSpec, Reference, Scalar, Status
from dlrun.catalog.models import ImageSpec, SystemSpec, WorkloadSpec, peak_for
from dlrun.catalog.partitions import axis_problem, select as select_partition
from dlrun.errors import UsageError
from dlrun.runoptions import RUN_OPTIONS

#: Axes whose dlrun value becomes one of the point's own fields; the others go to `extra` (benchmark flags).
FIELD_AXES = set(WORKLOAD_AXES) | set(COUNT_AXES) | {"fabric", "precision", "allreduce_strategy", "storage",
                                                       "parallelism", "partition"}


@dataclass(frozen=True)
class Point:
    experiment: str
    index: int
    system: str | None
    values: dict[str, AxisValue]     # axis -> the value of this point (paper label and dlrun value)
    workload: str | None
    image: str | None = None
    nodes: int | None = None
    ranks_per_node: int | None = None
    gpus: int = 0
    fabric: str | None = None
    precision: str = "fp32"
    batch_per_device: int | None = None
    batch_from: str = ""
    steps: int | None = None
    warmup_steps: int | None = None
    repeats: int = 1
    data_workers: int | None = None
    parameter_servers: int | None = None
    allreduce_strategy: str | None = None  # tf_cnn_benchmarks VARIABLE_UPDATE[:ALL_REDUCE_SPEC]
    dist: str | None = None                # --dist from the parallelism axis or a settings rule (None: default)
    grad_accum: int | None = None
    storage: str | None = None  # --data: the directory on the file system the `storage` axis names
    partition: str | None = None  # --partition: the partition the `partition` axis names (None: the system's)
    extra: dict[str, Scalar] = field(default_factory=dict)
    references: tuple[str, ...] = ()
    skip: str | None = None

    def label(self) -> str:
        return " ".join(f"{name}={value.paper}" for name, value in self.values.items())

    def plan_options(self) -> dict[str, Any]:
        """Keyword arguments for `dlrun.plan.resolve_plan`: every run option declared with an `axis`
        (dlrun.runoptions), from the point's field of that name (None: the plan's default)."""
        options = {opt.name: getattr(self, opt.axis) for opt in RUN_OPTIONS if opt.axis is not None}
        return {**options, **({"grad_accum": self.grad_accum} if self.grad_accum is not None else {})}

    @property
    def parallelism(self) -> str | None:
        """--dist: the `parallelism` axis's value, else a settings rule's (None: the plan's default)."""
        return self.dist

    @property
    def dataparallel_gpus(self) -> int | None:
        """--dataparallel-gpus: a DataParallel point's GPU count (its one process drives that many)."""
        return self.gpus if self.dist == "dataparallel" and self.gpus else None

    @property
    def variable_update(self) -> str | None:
        """tf_cnn_benchmarks --variable_update, the part of `allreduce_strategy` before the colon."""
        return self.allreduce_strategy.partition(":")[0] if self.allreduce_strategy else None

    @property
    def all_reduce_spec(self) -> str | None:
        """tf_cnn_benchmarks --all_reduce_spec, the part of `allreduce_strategy` after the colon."""
        return (self.allreduce_strategy.partition(":")[2] or None) if self.allreduce_strategy else None

    def as_dict(self) -> dict[str, Any]:
        return {"experiment": self.experiment, "index": self.index, "system": self.system,
                "axes": {n: {"paper": v.paper, "dlrun": v.dlrun} for n, v in self.values.items()},
                "workload": self.workload, "image": self.image, "nodes": self.nodes,
                "ranks_per_node": self.ranks_per_node, "gpus": self.gpus, "fabric": self.fabric,
                "precision": self.precision, "batch_per_device": self.batch_per_device,
                "batch_from": self.batch_from, "steps": self.steps, "warmup_steps": self.warmup_steps,
                "repeats": self.repeats, "data_workers": self.data_workers,
                "parameter_servers": self.parameter_servers, "allreduce_strategy": self.allreduce_strategy,
                "dist": self.dist, "grad_accum": self.grad_accum, "storage": self.storage, "partition": self.partition,
                "extra": dict(self.extra),
                "references": list(self.references), "skip": self.skip}


def matches(conditions: Conditions, values: Mapping[str, AxisValue], system: str | None) -> bool:
    """Whether a point (its axis values, its system) satisfies every condition."""
    for key, wanted in conditions.items():
        options = wanted if isinstance(wanted, list) else [wanted]
        if key == "system":
            if system is None or system not in [str(option) for option in options]:
                return False
        elif key not in values or not any(values[key].matches(option) for option in options):
            return False
    return True


def applies(reference: Reference, values: Mapping[str, AxisValue], system: str | None) -> bool:
    """A reference applies to every point it reads (see Reference.point_sets)."""
    return any(matches(conditions, values, system) for conditions in reference.point_sets())


def effective_status(experiment: ExperimentSpec, workloads: Mapping[str, WorkloadSpec]) -> Status:
    """The declared status, updated for what exists by now: the workloads it waits for, or every capability a
    needs-feature status requires (read from the code, `dlrun.catalog.capabilities`) makes it runnable."""
    from dlrun.catalog.capabilities import has_with

    status = experiment.status
    if status.kind == "needs-feature" and status.requires and all(has_with(name, workloads)
                                                                  for name in status.requires):
        return Status(kind="runnable", requires=status.requires)
    if status.kind == "needs-workload":
        still = [name for name in status.workloads if name not in workloads]
        if not still:
            return Status(kind="runnable")
        if still != status.workloads:
            return Status(kind="needs-workload", workloads=still, reason=status.reason)
    return status


def expand(experiment: ExperimentSpec, system: SystemSpec | None, workloads: Mapping[str, WorkloadSpec],
           images: Mapping[str, ImageSpec]) -> list[Point]:
    """Every point of the matrix (the product of the axes less the exclusions) for `system`.

    model-facts experiments count on no system: pass None."""
    if experiment.measure != "model-facts" and system is None:
        raise ValueError(f"experiment {experiment.id} runs on a system; name one")
    system_name = system.name if system is not None else None
    if system is not None:
        check_partitions(experiment, system)
    status = effective_status(experiment, workloads)
    points: list[Point] = []
    for combo in itertools.product(*[[(axis.name, value) for value in axis.values] for axis in experiment.axes]):
        values = dict(combo)
        if any(matches(ex.when, values, system_name) for ex in experiment.exclusions):
            continue
        points.append(_point(experiment, status, system, values, workloads, images, len(points)))
    return points


def check_partitions(experiment: ExperimentSpec, system: SystemSpec) -> None:
    """Every value of the experiment's `partition` axis is a partition `system` models (UsageError, one line
    naming the value and the valid ones)."""
    axis = experiment.axis("partition")
    for value in axis.values if axis is not None else []:
        problem = axis_problem(system, str(value.dlrun)) if value.dlrun is not None else None
        if problem:
            raise UsageError(f"experiment {experiment.id}: axis partition {value.paper!r}: {problem}")


def _chosen(experiment: ExperimentSpec, values: dict[str, AxisValue], system_name: str | None
            ) -> tuple[dict[str, Any], str]:
    """The point's settings from the experiment's run block and its matching rules (later rules win), and
    where a rule's batch size comes from."""
    run = experiment.run
    chosen: dict[str, Any] = {"steps": run.steps if run else None, "warmup_steps": run.warmup_steps if run else None,
                              "data_workers": None, "ranks_per_node": None, "image": experiment.image,
                              "batch_per_device": None, "dist": None, "grad_accum": None}
    batch_from = ""
    for rule in experiment.settings:
        if not matches(rule.when, values, system_name):
            continue
        chosen.update({key: getattr(rule, key) for key in chosen if getattr(rule, key) is not None})
        if rule.batch_per_device is not None:
            batch_from = f"rule: {rule.why}"
    return chosen, batch_from


def _point(experiment: ExperimentSpec, status: Status, system: SystemSpec | None, values: dict[str, AxisValue],
           workloads: Mapping[str, WorkloadSpec], images: Mapping[str, ImageSpec], index: int) -> Point:
    system_name = system.name if system is not None else None
    chosen, batch_from = _chosen(experiment, values, system_name)
    dlrun = {name: value.dlrun for name, value in values.items()}
    workload = next((str(dlrun[name]) for name in WORKLOAD_AXES if dlrun.get(name) is not None), None)
    base = {"experiment": experiment.id, "index": index, "system": system_name, "values": values,
            "workload": workload, "repeats": experiment.run.repeats if experiment.run else 1,
            "references": tuple(ref.id for ref in experiment.references if applies(ref, values, system_name)),
            "extra": {name: value for name, value in dlrun.items() if name not in FIELD_AXES and value is not None}}
    skip = _unrunnable(status, values, workload, workloads)
    if experiment.measure == "model-facts" or system is None:
        return Point(**base, skip=skip)
    return _placed(experiment, system, dlrun, chosen, batch_from, base, skip, workloads.get(workload or ""), images)


def _placed(experiment: ExperimentSpec, system: SystemSpec, dlrun: Mapping[str, Scalar | None],
            chosen: dict[str, Any], batch_from: str, base: dict[str, Any], skip: str | None,
            workload: WorkloadSpec | None, images: Mapping[str, ImageSpec]) -> Point:
    """A point on a system (on its partition's nodes, for a `partition` axis): its image, layout, batch, fabric
    and precision, or why the system cannot run it. A GPU experiment's point on a partition without GPUs runs on
    its CPUs: the axis asked for that partition."""
    partition = str(dlrun["partition"]) if dlrun.get("partition") is not None else None
    system = select_partition(system, partition) if partition is not None else system
    device = "cpu" if partition is not None and not system.gpus_per_node else experiment.device
    image_name = chosen["image"] or system.default_image
    dist = str(dlrun["parallelism"]) if dlrun.get("parallelism") else chosen["dist"]
    layout = _layout(device, system, dlrun, chosen["ranks_per_node"], dist == "dataparallel")
    nodes, ranks_per_node, gpus = layout if isinstance(layout, tuple) else (None, None, 0)
    batch, batch_from = _batch(dlrun, chosen["batch_per_device"], batch_from, ranks_per_node, system, workload)
    precision = str(dlrun.get("precision") or "fp32")
    fabric = str(dlrun["fabric"]) if dlrun.get("fabric") else None
    storage = _storage_path(dlrun.get("storage"), system)
    problems = (skip, _image_problem(image_name, system, workload, images), layout, batch,
                _fabric_problem(fabric, system), _precision_problem(precision, device, system),
                storage if storage and not storage.startswith("/") else None)
    skip = next((problem for problem in problems if isinstance(problem, str)), None)
    strategy = dlrun.get("allreduce_strategy")
    return Point(**base, image=image_name, nodes=nodes, ranks_per_node=ranks_per_node, gpus=gpus, fabric=fabric,
                 precision=precision, batch_per_device=batch if isinstance(batch, int) else None,
                 batch_from=batch_from, steps=chosen["steps"], warmup_steps=chosen["warmup_steps"],
                 data_workers=_int_or_none(dlrun.get("data_workers", chosen["data_workers"])),
                 parameter_servers=_int_or_none(dlrun.get("parameter_servers") or None),
                 allreduce_strategy=str(strategy) if strategy else None, dist=dist,
                 grad_accum=chosen["grad_accum"], skip=skip, partition=partition,
                 storage=storage if storage and storage.startswith("/") else None)


def _storage_path(name: Scalar | None, system: SystemSpec) -> str | None:
    """The directory of the system's file system `name` (its `storage:` entry), or why it has none."""
    if name is None:
        return None
    found = system.storage.get(str(name))
    if found is None:
        return (f"system {system.name!r} declares no file system {name!r} (storage: "
                f"{', '.join(system.storage) or 'none'})")
    return found.path


def _int_or_none(value: Any) -> int | None:
    return int(value) if value is not None else None


def _unrunnable(status: Status, values: Mapping[str, AxisValue], workload: str | None,
                workloads: Mapping[str, WorkloadSpec]) -> str | None:
    if status.kind in ("needs-feature", "not-reproducible"):
        return f"{status.kind}: {status.reason}"
    for name, value in values.items():
        if value.dlrun is None:
            return f"{name} {value.paper!r} has no dlrun setting: {value.missing}"
    if workload is not None and workload not in workloads:
        why = f" ({status.reason})" if workload in status.workloads else ""
        return f"needs workload {workload!r}, which does not exist yet{why}"
    return None


def _layout(device: str, system: SystemSpec, dlrun: Mapping[str, Scalar | None],
            rule_ranks: int | None, one_process: bool = False) -> tuple[int, int, int] | str:
    """(nodes, ranks per node, GPUs) of a point on `device` (gpu, cpu), or why the system cannot hold it.
    `one_process`: a DataParallel point, one process on one node over its GPU count."""
    per_node_gpus = system.gpus_per_node
    ranks = dlrun.get("ranks_per_node") or rule_ranks
    on_gpus = device == "gpu"
    if on_gpus and per_node_gpus == 0:
        return f"system {system.name!r} has no GPUs"
    if dlrun.get("gpus") is not None:
        total = int(dlrun["gpus"])  # type: ignore[arg-type]
        if one_process:
            return (1, 1, total) if total <= per_node_gpus else \
                f"DataParallel drives one node's GPUs: needs {total}; system {system.name!r} has {per_node_gpus}"
        if total > system.nodes * per_node_gpus:
            return (f"needs {total} GPUs; system {system.name!r} has {system.nodes * per_node_gpus} "
                    f"({system.nodes} node(s) x {per_node_gpus})")
        ranks = int(ranks or min(total, per_node_gpus))
        if total % ranks:
            return f"{total} GPUs do not fill whole nodes of {ranks}"
        nodes = total // ranks
    elif dlrun.get("cpu_cores") is not None:
        cores = int(dlrun["cpu_cores"])  # type: ignore[arg-type]
        ranks = system.cpu.cores
        nodes = math.ceil(cores / ranks)
        if cores % ranks:
            return f"{cores} cores do not fill whole nodes of {ranks} (system {system.name!r})"
    else:
        nodes = int(dlrun.get("nodes") or 1)  # type: ignore[arg-type]
        ranks = int(ranks or (per_node_gpus if on_gpus else 1))
    if nodes > system.nodes:
        return f"needs {nodes} nodes; system {system.name!r} has {system.nodes}"
    if on_gpus and ranks > per_node_gpus:
        return f"needs {ranks} GPUs per node; system {system.name!r} has {per_node_gpus}"
    return nodes, int(ranks), nodes * int(ranks) if on_gpus else 0


def _batch(dlrun: Mapping[str, Scalar | None], rule_batch: int | None, rule_why: str, ranks: int | None,
           system: SystemSpec, workload: WorkloadSpec | None) -> tuple[int | str | None, str]:
    """(samples per rank, where that number comes from); a str in place of the number says why there is none."""
    if dlrun.get("batch_per_device") is not None:
        return int(dlrun["batch_per_device"]), "axis batch_per_device"  # type: ignore[arg-type]
    if workload is not None and not workload.trains:
        return None, ""  # a collective has message sizes, not batches
    if dlrun.get("batch_per_node") is not None and ranks:
        per_node = int(dlrun["batch_per_node"])  # type: ignore[arg-type]
        if per_node % ranks:
            return f"batch_per_node {per_node} does not divide over {ranks} ranks", ""
        return per_node // ranks, f"axis batch_per_node {per_node} / {ranks} ranks"
    if rule_batch is not None:
        return rule_batch, rule_why
    if workload is not None and workload.name in system.batch_sizes:
        return system.batch_sizes[workload.name], f"system {system.name} batch_sizes"
    if system.default_batch_size is not None:
        return system.default_batch_size, f"system {system.name} default_batch_size"
    if workload is not None and workload.trains:
        return workload.default_batch_size, f"workload {workload.name} default_batch_size"
    return None, ""


def _image_problem(name: str, system: SystemSpec, workload: WorkloadSpec | None,
                   images: Mapping[str, ImageSpec]) -> str | None:
    image = images.get(name)
    if image is None:
        return f"image {name!r} does not exist"
    if image.kind == "host":
        return None
    if system.arch not in image.arch:
        return f"image {name!r} is built for {', '.join(image.arch)}, not {system.arch} (system {system.name!r})"
    if image.harness_framework is None and workload is not None and not workload.tf_cnn_model:
        return f"image {name!r} runs tf_cnn_benchmarks, which has no model for workload {workload.name!r}"
    return None


def _fabric_problem(fabric: str | None, system: SystemSpec) -> str | None:
    if fabric is not None and fabric not in system.fabrics:
        return f"system {system.name!r} has no {fabric} fabric (it has: {', '.join(system.fabrics)})"
    return None


def _precision_problem(precision: str, device: str, system: SystemSpec) -> str | None:
    """amp on a GPU whose nominal peaks are known but include no half-precision units (e.g. GTX 1080 Ti)."""
    gpus = system.gpus
    if precision in ("fp32", "tf32") or device != "gpu" or gpus is None or not gpus.peak:
        return None
    if peak_for(gpus.peak, precision) is None:
        return f"{gpus.model} has no fast half-precision units (its nominal peaks: " \
               f"{', '.join(p.precision for p in gpus.peak)})"
    return None
