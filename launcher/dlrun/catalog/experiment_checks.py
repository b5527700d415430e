"""Checks of an experiment against the rest of the catalog: its systems, images and workloads exist (or are
declared missing with a reason), and every condition names an axis of the experiment and one of its values.

Each problem is (location, message); the loader turns the location into the file's line number.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from dlrun.catalog.experiment_vocabulary import WORKLOAD_AXES
from dlrun.catalog.experiments import Conditions, ExperimentSpec
from dlrun.catalog.partitions import axis_problem
from dlrun.errors import closest

Location = tuple[Any, ...]
#: Made from the probed host by `load_catalog(host=...)`, so a catalog loaded without one lacks it; every
#: machine dlrun runs on has it, and an experiment of dlrun's own may name it.
LOCALHOST = "localhost"


def experiment_problems(experiment: ExperimentSpec, systems: Mapping[str, Any], workloads: Mapping[str, Any],
                        images: Mapping[str, Any],
                        experiments: Mapping[str, ExperimentSpec]) -> Iterator[tuple[Location, str]]:
    for index, name in enumerate(experiment.systems):
        if name not in systems and name != LOCALHOST:
            yield ("systems", index), _unknown("system", name, systems)
    if experiment.image and experiment.image not in images:
        yield ("image",), _unknown("image", experiment.image, images)
    for index, rule in enumerate(experiment.settings):
        if rule.image and rule.image not in images:
            yield ("settings", index, "image"), _unknown("image", rule.image, images)
    yield from _workload_problems(experiment, workloads)
    yield from _partition_problems(experiment, systems)
    for loc, conditions, others in _all_conditions(experiment, experiments):
        yield from _condition_problems(loc, conditions, [experiment, *others], systems)


def _unknown(kind: str, name: str, known: Mapping[str, Any]) -> str:
    hint = closest(name, known)
    return f"unknown {kind} {name!r}" + (f"; did you mean {hint!r}?" if hint else "")


def _workload_problems(experiment: ExperimentSpec, workloads: Mapping[str, Any]) -> Iterator[tuple[Location, str]]:
    declared = set(experiment.status.workloads)
    used = set()
    for a, axis in enumerate(experiment.axes):
        if axis.name not in WORKLOAD_AXES:
            continue
        for v, value in enumerate(axis.values):
            if value.dlrun is None:
                continue
            used.add(str(value.dlrun))
            if str(value.dlrun) not in workloads and str(value.dlrun) not in declared:
                yield (("axes", a, "values", v, "dlrun"),
                       _unknown("workload", str(value.dlrun), workloads)
                       + "; if it is still to be written, list it in status.workloads (needs-workload)")
    for index, name in enumerate(experiment.status.workloads):
        if name not in used:
            yield ("status", "workloads", index), f"{name!r} is no model's, collective's or application's dlrun value"


def _partition_problems(experiment: ExperimentSpec, systems: Mapping[str, Any]) -> Iterator[tuple[Location, str]]:
    """Every value of a `partition` axis is a partition of each system of the experiment the catalog holds."""
    for a, axis in enumerate(experiment.axes):
        if axis.name != "partition":
            continue
        for v, value in enumerate(axis.values):
            held = [systems[name] for name in experiment.systems if name in systems and value.dlrun is not None]
            for problem in filter(None, (axis_problem(system, str(value.dlrun)) for system in held)):
                yield ("axes", a, "values", v, "dlrun"), problem


def _all_conditions(experiment: ExperimentSpec, experiments: Mapping[str, ExperimentSpec]
                    ) -> Iterator[tuple[Location, Conditions, list[ExperimentSpec]]]:
    for index, exclusion in enumerate(experiment.exclusions):
        yield ("exclusions", index, "when"), exclusion.when, []
    for index, rule in enumerate(experiment.settings):
        yield ("settings", index, "when"), rule.when, []
    for r, ref in enumerate(experiment.references):
        others: list[ExperimentSpec] = []
        if ref.derive:
            for index, other in enumerate(ref.derive.with_experiments):
                if other not in experiments:
                    yield ("references", r, "derive", "with_experiments", index), {"?": other}, []
                else:
                    others.append(experiments[other])
            for part in ("numerator", "denominator", "baseline"):
                yield ("references", r, "derive", part), getattr(ref.derive, part), others
            for index, axis in enumerate(ref.derive.over):
                yield ("references", r, "derive", "over", index), {axis: []}, others
        yield ("references", r, "conditions"), ref.conditions, others
        for d, direction in enumerate(ref.directions):
            for part in ("subject", "than", "where"):
                yield ("references", r, "directions", d, part), getattr(direction, part), others
            if direction.axis:
                yield ("references", r, "directions", d, "axis"), {direction.axis: []}, others


def _condition_problems(loc: Location, conditions: Conditions, scope: list[ExperimentSpec],
                        systems: Mapping[str, Any]) -> Iterator[tuple[Location, str]]:
    if "?" in conditions:
        yield loc, f"unknown experiment {conditions['?']!r}"
        return
    for key, wanted in conditions.items():
        options = wanted if isinstance(wanted, list) else [wanted]
        check = _system_problems if key == "system" else _axis_problems
        for problem in check(key, options, scope):
            yield (*loc, key), problem


def _system_problems(key: str, options: list, scope: list[ExperimentSpec]) -> Iterator[str]:
    allowed = {name for experiment in scope for name in experiment.systems}
    for option in options:
        if str(option) not in allowed:
            yield f"system {option!r} is not among the experiment's systems ({', '.join(sorted(allowed)) or 'none'})"


def _axis_problems(key: str, options: list, scope: list[ExperimentSpec]) -> Iterator[str]:
    axes = [axis for experiment in scope for axis in experiment.axes if axis.name == key]
    if not axes:
        names = sorted({axis.name for experiment in scope for axis in experiment.axes} | {"system"})
        yield f"{key!r} is not an axis of this experiment; valid: {', '.join(names)}"
        return
    for option in options:
        if not any(axis.find(option) for axis in axes):
            labels = [str(value.paper) for axis in axes for value in axis.values]
            yield f"{option!r} is not a value of axis {key}; valid: {', '.join(labels)}"
