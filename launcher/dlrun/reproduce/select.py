"""What a `dlrun reproduce` command line selects: the systems, the `--where AXIS=VALUE` filters, the repeats.

Every bad value is a UsageError naming it, what would be valid and the closest match (exit 2), raised before
anything runs.
"""
from __future__ import annotations

from collections.abc import Sequence

from dlrun.catalog.experiments import Conditions, ExperimentSpec
from dlrun.errors import UsageError, closest


def choose_systems(experiment: ExperimentSpec, system: str | None, *, dry_run: bool) -> list[str | None]:
    """The systems to expand the experiment for; None stands for "no system" (model facts are counted
    from the harness's models, on no system). An experiment that names none (not reproducible) has nothing
    to render, and cannot run.

    A dry run renders every system of the experiment unless one is named; a real run needs `--system`
    unless the experiment ran on one system only. `localhost` is valid where the experiment names it."""
    if experiment.measure == "model-facts":
        if system is not None:
            raise UsageError(f"experiment {experiment.id} counts model facts from the harness's own models, on no "
                             f"system; leave out --system {system}")
        return [None]
    systems = list(experiment.systems)
    if not systems and dry_run:
        return []  # nothing to render: the dry run says why
    if not systems:
        raise UsageError(f"experiment {experiment.id} names no system it could run on "
                         f"({experiment.status.kind}: {experiment.status.reason})")
    if system is not None:
        if system not in systems:
            hint = closest(system, systems)
            raise UsageError(f"system {system!r} is not a system of experiment {experiment.id}"
                             + (f"; did you mean {hint!r}?" if hint else ";") + f" valid: {', '.join(systems)}")
        return [system]
    if dry_run or len(systems) == 1:
        return systems
    raise UsageError(f"experiment {experiment.id} ran on {len(systems)} systems; name the one to run on with "
                     f"--system (valid: {', '.join(systems)}), or render them all with --dry-run")


def parse_where(experiment: ExperimentSpec, specs: Sequence[str]) -> Conditions:
    """`--where AXIS=VALUE` (repeatable) -> conditions: values of one axis are alternatives, different axes
    must all hold. A value is an axis value as the paper wrote it or as dlrun runs it."""
    conditions: dict[str, list] = {}
    names = [axis.name for axis in experiment.axes]
    for spec in specs:
        name, sep, value = spec.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            example = f"{names[0]}={experiment.axes[0].values[0].paper}"
            raise UsageError(f"bad --where {spec!r}; valid: AXIS=VALUE, e.g. --where {example!r}")
        axis = experiment.axis(name)
        if axis is None:
            hint = closest(name, names)
            raise UsageError(f"--where {spec!r}: {name!r} is not an axis of experiment {experiment.id}"
                             + (f"; did you mean {hint!r}?" if hint else ";") + f" valid: {', '.join(names)}")
        found = axis.find(value)
        if found is None:
            labels = [str(v.paper) for v in axis.values]
            dlrun = [str(v.dlrun) for v in axis.values if v.dlrun is not None and str(v.dlrun) not in labels]
            hint = closest(value, labels + dlrun)
            raise UsageError(f"--where {spec!r}: {value!r} is not a value of axis {name}"
                             + (f"; did you mean {hint!r}?" if hint else ";") + f" valid: {', '.join(labels)}")
        conditions.setdefault(name, []).append(found.paper)
    return conditions


def check_repeats(repeats: int | None) -> None:
    if repeats is not None and repeats <= 0:
        raise UsageError(f"--repeats must be a positive integer, got {repeats}")
