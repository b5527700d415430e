"""The published numbers of an experiment against what the store holds of its points: one row per
quantitative reference, with the measured geometric mean and its 95 % interval (t on the logs of the
repeats; none below 3 repeats), the ratio to the published value and the verdict: `within` when the
interval lies inside the tolerance band, `outside` when it lies wholly outside, else `inconclusive` with
the repeats per point that the spread seen so far says would decide. Counted facts (parameters,
multiply-adds of a model) are exact: judged by their value.

The references a point's value answers directly (`check` value, at-most, at-least or informational, a value
or a range, no `derive`), for every metric the store holds, model facts included; and the derived ones
(a speedup, gain, ratio, reduction, scaling efficiency, rate per node or time to train) computed from the
points of the system (`dlrun.reproduce.derived`). What needs other systems' or experiments' points, or an
aggregate over an axis, is listed as `derived` and left to `dlrun compare`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from dlrun.catalog.experiment_points import applies
from dlrun.catalog.experiment_vocabulary import MEASURED_METRICS
from dlrun.catalog.experiments import ExperimentSpec, Reference
from dlrun.reproduce.derived import Scale, evaluate
from dlrun.reproduce.model_facts import FACT_UNITS
from dlrun.reproduce.trust import trusted
from dlrun.reproduce.work import PointWork
from dlrun.results.compare.groups import UNIT_ALIASES
from dlrun.results.compare.stats import LogEstimate, judge, summarize

#: Verdicts, in the order a reader should worry about them. `implausible`: every run that would answer it was
#: left out (dlrun.reproduce.trust).
VERDICTS = ("outside", "unit differs", "implausible", "inconclusive", "within", "informational", "no runs",
            "skipped", "derived",            "not measured")


@dataclass
class ReferenceRow:
    reference: Reference
    points: list[str]                # ids of the points the reference reads
    published: str                   # as printed: value or range, with the check
    measured: float | None = None    # geometric mean over the runs of those points (or the derived quantity)
    ci: tuple[float, float] | None = None  # its 95 % interval (3 runs a side or more)
    runs: int = 0
    unit: str | None = None          # the unit of the stored results
    ratio: float | None = None       # measured / published value
    verdict: str = "no runs"
    why: str = ""
    interval: str = ""               # how `ci` was made, or why there is none ("too few repeats ...")
    repeats_needed: int | None = None  # inconclusive: repeats per point that would decide, at the spread seen

    @property
    def source(self) -> str:
        quote = self.reference.source
        return f"{quote.doc}, {quote.where}: \"{quote.quote}\""


def published_text(ref: Reference) -> str:
    def number(value: float) -> str:
        return f"{value:,.0f}" if abs(value) >= 1e5 else f"{value:,.5g}"

    shown = number(ref.value) if ref.value is not None else f"{number(ref.range[0])} to {number(ref.range[1])}"  # type: ignore[index]
    prefix = {"at-most": "at most ", "at-least": "at least "}.get(ref.check, "")
    return f"{prefix}{shown} {ref.unit}"


def compare_references(experiment: ExperimentSpec, works: list[PointWork], system: str | None) -> list[ReferenceRow]:
    """A row for each quantitative reference that reads at least one of `works` (the selected points of one
    system), judged without the runs and points that are implausible (saying so in the row)."""
    rows = []
    kept, left_out = trusted(works)
    for ref in experiment.references:
        if ref.kind != "quantitative":
            continue
        read = [work for work in kept if applies(ref, work.point.values, system)]  # a speedup's baseline too
        if not read:
            continue
        rows.append(_left_out(_row(ref, read, system), [left_out[w.id] for w in read if w.id in left_out]))
    return rows


def _left_out(row: ReferenceRow, reasons: list[str]) -> ReferenceRow:
    if not reasons:
        return row
    said = "left out of the verdict: " + "; ".join(reasons)
    row.why = f"{row.why}; {said}" if row.why else said
    if row.verdict == "no runs" and row.measured is None:
        row.verdict = "implausible"
    return row


def _row(ref: Reference, read: list[PointWork], system: str | None) -> ReferenceRow:
    row = ReferenceRow(ref, [work.id for work in read], published_text(ref))
    if ref.metric not in MEASURED_METRICS:
        row.verdict, row.why = "not measured", f"dlrun does not measure {ref.metric}"
        return row
    if ref.derive is not None and ref.derive.op != "value":
        return _derived_row(row, ref, read, system)
    stored, values, units = _stored(ref.metric, read)
    if not values:
        return _unmeasured(row, read)
    row.unit = ", ".join(sorted(units))
    estimate = _measure(row, ref, values)
    if units and units != {UNIT_ALIASES.get(ref.unit or "", ref.unit)}:
        row.verdict, row.why = "unit differs", f"{row.unit} here, {ref.unit} published"
        return row
    if ref.check == "informational":
        # the reference's first clause; the whole reason is in `dlrun experiments show`
        row.verdict = "informational"
        row.why = "compared, never judged: " + re.split(r"[:;.]\s", (ref.ambiguous or ref.note or "").strip())[0]
        return row
    context = [f"geometric mean over {len(read)} points"] if len(read) > 1 else []
    if len(stored) > len(values):
        context.append(f"{len(stored) - len(values)} run(s) left out: a value that is no rate")
    return _judged(row, ref, estimate, Scale(), "; ".join(context))


def _stored(metric: str, read: list[PointWork]) -> tuple[list[float], list[float], set[str]]:
    """The points' stored values of `metric`, the positive finite ones among them (rates and counts), and
    their units."""
    stored = [run.values[metric] for work in read for run in work.stored if metric in run.values]
    units = {run.units[metric] for work in read for run in work.stored if metric in run.units}
    return stored, [value for value in stored if math.isfinite(value) and value > 0], units


def _unmeasured(row: ReferenceRow, read: list[PointWork]) -> ReferenceRow:
    """A row without values: `skipped` when every point it reads is skipped, else `no runs`."""
    skipped = [work for work in read if work.skip]
    if len(skipped) == len(read):
        row.verdict, row.why = "skipped", skipped[0].skip or ""
    return row


def _measure(row: ReferenceRow, ref: Reference, values: list[float]) -> LogEstimate:
    """Fill the row's measured value, interval and ratio from the runs' values; the estimate to judge."""
    if ref.metric in FACT_UNITS and len(set(values)) == 1:  # a count, not a measurement
        estimate, row.interval = LogEstimate.exact(values[0]), "exact: a counted fact"
        row.runs, row.measured = len(values), values[0]
    else:
        stats = summarize(values)
        estimate, row.interval = stats.estimate, stats.interval
        row.runs, row.measured = stats.n, stats.geomean
        row.ci = (stats.ci_low, stats.ci_high) if stats.ci_low is not None and stats.ci_high is not None else None
    if ref.value:
        row.ratio = row.measured / ref.value
    return estimate


def _judged(row: ReferenceRow, ref: Reference, estimate: LogEstimate, scale: Scale, context: str) -> ReferenceRow:
    judgement = judge(estimate, *scale.band(*band(ref)))
    row.verdict, row.repeats_needed = judgement.verdict, judgement.repeats_needed
    row.why = "; ".join(part for part in (context, judgement.why) if part)
    return row


def _derived_row(row: ReferenceRow, ref: Reference, read: list[PointWork], system: str | None) -> ReferenceRow:
    """A speedup, gain, ratio, reduction, scaling efficiency, rate per node or time to train, computed from
    the points' runs (dlrun.reproduce.derived) and judged as a published value is."""
    assert ref.derive is not None
    got = evaluate(ref, read, system)
    if got.value is None:
        skipped = [work for work in read if work.skip]
        if got.verdict == "no runs" and skipped and len(skipped) == len(read):
            row.verdict, row.why = "skipped", skipped[0].skip or ""
        else:
            row.verdict, row.why = got.verdict, got.why
        return row
    row.measured, row.ci, row.runs, row.unit = got.value, got.ci, got.runs, ref.unit
    row.interval = got.interval
    if got.units and len(got.units) > 1:
        row.verdict, row.why = "unit differs", f"the operands are in {', '.join(sorted(got.units))}"
        return row
    if ref.value:
        row.ratio = got.value / ref.value
    context = f"a {ref.derive.op} computed from {got.runs} runs of {len(read)} points"
    if ref.check == "informational":
        row.verdict, row.why = "informational", context
        return row
    assert got.estimate is not None  # a derived value comes with the estimate it was taken from
    return _judged(row, ref, got.estimate, got.scale, context)


def band(ref: Reference) -> tuple[float, float]:
    """The values a judged reference accepts, in its unit: its value or range widened by its tolerance; open
    below for `at-most`, open above for `at-least`."""
    assert ref.tolerance is not None  # a judged quantitative reference has one (ExperimentSpec checks)
    tolerance = ref.tolerance
    slack = 1e-12  # as Tolerance.allows: a value printed to its last digit is within
    if ref.range is not None:
        low, high = ref.range
        relative, bound = tolerance.relative or 0.0, tolerance.absolute or 0.0
        return (low - abs(low) * relative - bound - slack * max(1.0, abs(low)),
                high + abs(high) * relative + bound + slack * max(1.0, abs(high)))
    published = float(ref.value)  # type: ignore[arg-type]
    bound = tolerance.absolute if tolerance.absolute is not None else abs(published) * float(tolerance.relative or 0)
    bound += slack * max(1.0, abs(published))
    low, high = published - bound, published + bound
    if ref.check == "at-most":
        return -math.inf, high
    if ref.check == "at-least":
        return low, math.inf
    return low, high
