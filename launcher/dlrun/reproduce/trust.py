"""Which stored runs a published number may be judged by: not those whose stored verdict is `implausible` or
`emulated` (another architecture's code run under qemu: no hardware figure), and not those of a point that scales well beyond ideal (scaling efficiency above dlrun.results.quality's
SUPERLINEAR against the point of the fewest devices that differs from it only in device count). What is
left out is said in the reference's row."""
from __future__ import annotations

import dataclasses

from dlrun.reproduce.comparisons import DEVICE_AXES
from dlrun.reproduce.work import PointWork
from dlrun.results.quality import SUPERLINEAR

PRIMARY = ("throughput", "busbw")
#: Stored verdicts whose runs no published number is judged by.
UNTRUSTED = ("implausible", "emulated")


def _rate(work: PointWork) -> float | None:
    """Mean of the point's primary metric per device, over its runs that are not implausible themselves."""
    if work.plan is None:
        return None
    for metric in PRIMARY:
        values = [run.values[metric] for run in work.stored if metric in run.values and run.verdict not in UNTRUSTED]
        if values:
            return sum(values) / len(values) / work.plan.world_size
    return None


def implausible_points(works: list[PointWork]) -> dict[str, str]:
    """point id -> why it is implausible: its rate per device well above that of its series' fewest devices."""
    series: dict[tuple, list[PointWork]] = {}
    for work in works:
        if _rate(work) is None:
            continue
        label = tuple((name, str(value.paper)) for name, value in sorted(work.point.values.items())
                      if name not in DEVICE_AXES)  # the model (and every other axis) stays: one series each
        series.setdefault(label, []).append(work)
    out: dict[str, str] = {}
    for members in series.values():
        base = min(members, key=lambda w: w.plan.world_size)  # type: ignore[union-attr]
        for work in members:
            efficiency = _rate(work) / _rate(base)  # type: ignore[operator]
            if work is not base and work.plan.world_size > base.plan.world_size and efficiency > SUPERLINEAR:  # type: ignore[union-attr]
                out[work.id] = (f"point {work.id} is implausible: scaling efficiency {efficiency * 100:.0f} % over "
                                f"{base.id} (above {SUPERLINEAR * 100:.0f} %)")
    return out


def trusted(works: list[PointWork]) -> tuple[list[PointWork], dict[str, str]]:
    """The works with only the runs a published number may be judged by, and point id -> what was left out."""
    points = implausible_points(works)
    kept, left_out = [], {}
    for work in works:
        bad = [run for run in work.stored if run.verdict in UNTRUSTED]
        if work.id in points:
            left_out[work.id] = points[work.id]
        elif bad:
            kinds = " or ".join(sorted({run.verdict for run in bad}))
            left_out[work.id] = f"{len(bad)} {kinds} run(s) of point {work.id}"
        gone = set(map(id, bad)) if work.id not in points else set(map(id, work.stored))
        kept.append(dataclasses.replace(work, stored=[run for run in work.stored if id(run) not in gone]))
    return kept, left_out
