"""Derived references: a published quantity computed from several measured points (a speedup over one GPU,
a gain over Lustre, a ratio of two models or precisions, a reduction, a scaling efficiency, a rate per node,
the time to train N samples), evaluated on the stored runs of one system.

Each side of the operation (the reference's own points and its baseline, or the numerator and the
denominator) pools the runs of the points its conditions select; the quantity comes from the two means and
its 95 % interval from `dlrun.results.stats.ratio_interval` (a bootstrap of the ratio of means). What needs
more than one system's points (a ratio of two systems), an aggregate over an axis (`aggregate`, `over`) or
another experiment's points (`with_experiments`) is not evaluated here: `dlrun compare` sets those out.
"""
from __future__ import annotations

from dataclasses import dataclass

from dlrun.catalog.experiment_points import matches
from dlrun.catalog.experiments import Reference
from dlrun.reproduce.work import PointWork
from dlrun.results.stats import ratio_interval, summarize

#: Units a time-for-samples reference may be published in, in seconds.
TIME_UNITS = {"s": 1.0, "min": 60.0, "h": 3600.0, "hours": 3600.0, "days": 86400.0, "d": 86400.0}


@dataclass
class Derived:
    """The measured quantity of a derived reference, or why there is none (`value` None, `why` set)."""

    value: float | None = None
    ci: tuple[float, float] | None = None
    runs: int = 0
    units: set[str] | None = None   # the stored unit(s) of the metric it was computed from
    why: str = ""
    verdict: str = "derived"        # without a value: "derived" (listed, see compare) or "no runs"


def evaluate(ref: Reference, read: list[PointWork], system: str | None) -> Derived:
    derive = ref.derive
    assert derive is not None
    if derive.aggregate or derive.with_experiments:
        over = f"averaged over {', '.join(derive.over)}" if derive.aggregate else ""
        more = f"with points of {', '.join(derive.with_experiments)}" if derive.with_experiments else ""
        return Derived(why=f"a {derive.op} {' and '.join(p for p in (over, more) if p)}: see dlrun compare")
    metric = ref.metric
    if derive.op in ("ratio", "reduction"):
        top, base = {**ref.conditions, **derive.numerator}, {**ref.conditions, **derive.denominator}
        names = ("numerator", "denominator")
    elif derive.op in ("speedup", "gain", "scaling-efficiency"):
        top, base = ref.conditions, {**ref.conditions, **derive.baseline}
        names = ("reference's points", "baseline")
    else:
        top, base, names = ref.conditions, None, ("reference's points", "")
    if "system" in {*(top or {}), *(base or {})} and system is not None:
        wanted = [c["system"] for c in (top, base) if c and "system" in c]
        if any(system not in (w if isinstance(w, list) else [w]) for w in wanted):
            return Derived(why=f"a {derive.op} between systems: see dlrun compare --by system")
    top_works = [w for w in read if matches(top, w.point.values, system)
                 and (base is None or not matches(base, w.point.values, system))]
    base_works = [w for w in read if base is not None and matches(base, w.point.values, system)]
    top_values = _values(top_works, metric)
    base_values = _values(base_works, metric)
    units = {run.units[metric] for w in top_works + base_works for run in w.stored if metric in run.units}
    missing = [name for name, values in ((names[0], top_values), (names[1], base_values))
               if name and not values]
    if missing:
        return Derived(why=f"no stored run of the {' or the '.join(missing)}", verdict="no runs")
    runs = len(top_values) + len(base_values)
    if base is None:
        return _one_side(ref, top_works, top_values, units, runs)
    interval = ratio_interval(base_values, top_values)
    low, high = interval.low, interval.high
    if derive.op == "scaling-efficiency":
        scale = _scale(derive.baseline, top_works, base_works)
        if scale is None:
            return Derived(why="the points' scales (their device or node counts) differ: see dlrun compare")
        return _made(100.0 * interval.ratio / scale, low, high, lambda r: 100.0 * r / scale, runs, units)
    if derive.op == "speedup":
        return _made(interval.ratio, low, high, lambda r: r, runs, units)
    if derive.op == "gain":
        return _made(100.0 * (interval.ratio - 1), low, high, lambda r: 100.0 * (r - 1), runs, units)
    if derive.op == "reduction":
        return _made(100.0 * (1 - interval.ratio), high, low, lambda r: 100.0 * (1 - r), runs, units)
    factor = 100.0 if ref.unit == "%" else 1.0  # ratio
    return _made(factor * interval.ratio, low, high, lambda r: factor * r, runs, units)


def _values(works: list[PointWork], metric: str) -> list[float]:
    return [run.values[metric] for work in works for run in work.stored if metric in run.values]


def _made(value: float, low: float | None, high: float | None, of, runs: int, units: set[str]) -> Derived:
    ci = (of(low), of(high)) if low is not None and high is not None else None
    return Derived(value=value, ci=ci, runs=runs, units=units)


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
    ci = (stats.ci_low, stats.ci_high) if stats.ci_low is not None and stats.ci_high is not None else None
    if derive.op == "per-node":
        nodes = {w.plan.nodes for w in works}
        if len(nodes) != 1:
            return Derived(why="the points run on different node counts: see dlrun compare")
        n = nodes.pop()
        return Derived(stats.mean / n, (ci[0] / n, ci[1] / n) if ci else None, runs, units)
    # time-for-samples: how long the published number of samples takes at the measured rate
    seconds = TIME_UNITS.get(ref.unit or "")
    if seconds is None or not derive.samples or stats.mean <= 0:
        return Derived(why=f"a time in {ref.unit!r}: dlrun converts s, min, h and days")
    time = derive.samples / stats.mean / seconds
    ci_time = (derive.samples / ci[1] / seconds, derive.samples / ci[0] / seconds) if ci and ci[0] > 0 else None
    return Derived(time, ci_time, runs, units)
