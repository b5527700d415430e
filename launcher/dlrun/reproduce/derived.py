"""Derived references: a published quantity computed from several measured points (a speedup over one GPU,
a gain over Lustre, a ratio of two models or precisions, a reduction, a scaling efficiency, a rate per node,
the time to train N samples), evaluated on the stored runs of one system.

Each side of the operation (the reference's own points and its baseline, or the numerator and the
denominator) pools the runs of the points its conditions select. Every quantity is a monotone function of
one estimate on the log scale (dlrun.results.compare.stats): the ratio of the two sides' geometric means with
Welch's t interval on the logs, or one side's geometric mean with its t interval. `Scale` carries that
function, so that the interval and the published tolerance band are compared on the same scale. What needs
more than one system's points (a ratio of two systems), an aggregate over an axis (`aggregate`, `over`) or
another experiment's points (`with_experiments`) is not evaluated here: `dlrun compare` sets those out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from dlrun.catalog.experiment_points import matches
from dlrun.catalog.experiments import Reference
from dlrun.reproduce.work import PointWork
from dlrun.results.compare.stats import LogEstimate, ratio, summarize

#: Units a time-for-samples reference may be published in, in seconds.
TIME_UNITS = {"s": 1.0, "min": 60.0, "h": 3600.0, "hours": 3600.0, "days": 86400.0, "d": 86400.0}


@dataclass(frozen=True)
class Scale:
    """q = a * exp(s * L) + b: a published quantity q as a monotone function of a log-scale estimate L
    (a log ratio of geometric means, or a log geometric mean), with s = 1 or -1 and a != 0."""

    a: float = 1.0
    s: int = 1
    b: float = 0.0

    def value(self, log_value: float) -> float:
        return self.a * math.exp(self.s * log_value) + self.b

    def interval(self, bounds: tuple[float, float] | None) -> tuple[float, float] | None:
        if bounds is None:
            return None
        low, high = sorted((self.value(bounds[0]), self.value(bounds[1])))
        return low, high

    def band(self, low: float, high: float) -> tuple[float, float]:
        """The band [low, high] of q on the log scale of L (open ends as infinities; an empty one as
        (-inf, -inf) or (inf, inf), which every interval lies outside)."""
        edges = sorted(((low - self.b) / self.a, (high - self.b) / self.a))  # of u = exp(s L), u > 0
        if edges[1] <= 0:
            return (-math.inf, -math.inf) if self.s > 0 else (math.inf, math.inf)
        logs = (-math.inf if edges[0] <= 0 else math.log(edges[0]), math.log(edges[1]) if math.isfinite(edges[1])
                else math.inf)
        return logs if self.s > 0 else (-logs[1], -logs[0])


@dataclass
class Derived:
    """The measured quantity of a derived reference, or why there is none (`value` None, `why` set)."""

    value: float | None = None
    ci: tuple[float, float] | None = None
    runs: int = 0
    units: set[str] | None = None   # the stored unit(s) of the metric it was computed from
    why: str = ""
    verdict: str = "derived"        # without a value: "derived" (listed, see compare) or "no runs"
    estimate: LogEstimate | None = None   # the log-scale estimate `scale` maps to the quantity
    scale: Scale = Scale()
    interval: str = ""              # how the interval was made, or why there is none


def evaluate(ref: Reference, read: list[PointWork], system: str | None) -> Derived:
    derive = ref.derive
    assert derive is not None
    if derive.aggregate or derive.with_experiments:
        over = f"averaged over {', '.join(derive.over)}" if derive.aggregate else ""
        more = f"with points of {', '.join(derive.with_experiments)}" if derive.with_experiments else ""
        return Derived(why=f"a {derive.op} {' and '.join(p for p in (over, more) if p)}: see dlrun compare")
    metric = ref.metric
    top, base, names = _operands(ref)
    if _between_systems(system, top, base):
        return Derived(why=f"a {derive.op} between systems: see dlrun compare --by system")
    top_works, base_works = _split(read, top, base, system)
    top_values = _values(top_works, metric)
    base_values = _values(base_works, metric)
    units = {run.units[metric] for w in top_works + base_works for run in w.stored if metric in run.units}
    missing = [name for name, values in zip(names, (top_values, base_values)) if name and not values]
    if missing:
        return Derived(why=f"no stored run of the {' or the '.join(missing)}", verdict="no runs")
    runs = len(top_values) + len(base_values)
    if base is None:
        return _one_side(ref, top_works, top_values, units, runs)
    r = ratio(base_values, top_values)
    if derive.op == "scaling-efficiency":
        scale = _scale(derive.baseline, top_works, base_works)
        if scale is None:
            return Derived(why="the points' scales (their device or node counts) differ: see dlrun compare")
        return _made(r.estimate, Scale(100.0 / scale), runs, units, r.interval)
    return _made(r.estimate, _ratio_scale(derive.op, ref.unit), runs, units, r.interval)


def _operands(ref: Reference) -> tuple[dict, dict | None, tuple[str, str]]:
    """The conditions of the two sides (the second None for a one-sided quantity), and their names."""
    derive = ref.derive
    assert derive is not None
    if derive.op in ("ratio", "reduction"):
        return ({**ref.conditions, **derive.numerator}, {**ref.conditions, **derive.denominator},
                ("numerator", "denominator"))
    if derive.op in ("speedup", "gain", "scaling-efficiency"):
        return ref.conditions, {**ref.conditions, **derive.baseline}, ("reference's points", "baseline")
    return ref.conditions, None, ("reference's points", "")


def _split(read: list[PointWork], top: dict, base: dict | None,
           system: str | None) -> tuple[list[PointWork], list[PointWork]]:
    """The points of each side (a point both sides' conditions select is the baseline's)."""
    if base is None:
        return [w for w in read if matches(top, w.point.values, system)], []
    in_base = [matches(base, w.point.values, system) for w in read]
    return ([w for w, b in zip(read, in_base) if not b and matches(top, w.point.values, system)],
            [w for w, b in zip(read, in_base) if b])


def _between_systems(system: str | None, top: dict, base: dict | None) -> bool:
    """Whether a side names a system other than `system` (a ratio of two systems: compare's)."""
    if system is None:
        return False
    wanted = [c["system"] for c in (top, base) if c and "system" in c]
    return any(system not in (w if isinstance(w, list) else [w]) for w in wanted)


def _ratio_scale(op: str, unit: str | None) -> Scale:
    """A gain (100 (r - 1)), a reduction (100 (1 - r)), or a speedup or ratio (r, x 100 in %)."""
    if op == "gain":
        return Scale(100.0, 1, -100.0)
    if op == "reduction":
        return Scale(-100.0, 1, 100.0)
    return Scale(100.0 if op == "ratio" and unit == "%" else 1.0)


def _values(works: list[PointWork], metric: str) -> list[float]:
    """The stored values of `metric`: positive and finite ones only (a rate's logs are taken)."""
    return [run.values[metric] for work in works for run in work.stored
            if metric in run.values and math.isfinite(run.values[metric]) and run.values[metric] > 0]


def _made(estimate: LogEstimate, scale: Scale, runs: int, units: set[str], interval: str) -> Derived:
    return Derived(value=scale.value(estimate.centre), ci=scale.interval(estimate.bounds()), runs=runs, units=units,
                   estimate=estimate, scale=scale, interval=interval)


def _scale(baseline: dict, top: list[PointWork], base: list[PointWork]) -> float | None:
    """How many times the baseline's devices or nodes the reference's points have (one value on each side)."""
    ratios = set()
    for axis in baseline:
        counts = []
        for works in (top, base):
            seen = {float(w.point.values[axis].dlrun) for w in works
                    if axis in w.point.values and isinstance(w.point.values[axis].dlrun, (int, float))}
            if len(seen) != 1:
                return None
            counts.append(seen.pop())
        if counts[1]:
            ratios.add(counts[0] / counts[1])
    return ratios.pop() if len(ratios) == 1 else None


def _one_side(ref: Reference, works: list[PointWork], values: list[float], units: set[str], runs: int) -> Derived:
    derive = ref.derive
    assert derive is not None
    stats = summarize(values)
    if derive.op == "per-node":
        nodes = {w.plan.nodes for w in works}
        if len(nodes) != 1:
            return Derived(why="the points run on different node counts: see dlrun compare")
        return _made(stats.estimate, Scale(1.0 / nodes.pop()), runs, units, stats.interval)
    # time-for-samples: how long the published number of samples takes at the measured rate
    seconds = TIME_UNITS.get(ref.unit or "")
    if seconds is None or not derive.samples:
        return Derived(why=f"a time in {ref.unit!r}: dlrun converts s, min, h and days")
    return _made(stats.estimate, Scale(derive.samples / seconds, -1), runs, units, stats.interval)
