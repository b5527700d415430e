"""The published numbers of an experiment against what the store holds of its points: one row per
quantitative reference, with the measured mean and its 95 % interval, the ratio to the published value and
the verdict.

The references a point's value answers directly (`check` value, at-most, at-least or informational, a value
or a range, no `derive`), for every metric the store holds, model facts included; and the derived ones
(a speedup, gain, ratio, reduction, scaling efficiency, rate per node or time to train) computed from the
points of the system (`dlrun.reproduce.derived`). What needs other systems' or experiments' points, or an
aggregate over an axis, is listed as `derived` and left to `dlrun compare`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from dlrun.catalog.experiment_points import applies
from dlrun.catalog.experiment_vocabulary import MEASURED_METRICS
from dlrun.catalog.experiments import ExperimentSpec, Reference
from dlrun.reproduce.derived import evaluate
from dlrun.reproduce.trust import trusted
from dlrun.reproduce.work import PointWork
from dlrun.results.compare.groups import UNIT_ALIASES
from dlrun.results.stats import summarize

#: Verdicts, in the order a reader should worry about them. `implausible`: every run that would answer it was
#: left out (dlrun.reproduce.trust).
VERDICTS = ("outside", "unit differs", "implausible", "within", "informational", "no runs", "skipped", "derived",
            "not measured")


@dataclass
class ReferenceRow:
    reference: Reference
    points: list[str]                # ids of the points the reference reads
    published: str                   # as printed: value or range, with the check
    measured: float | None = None    # mean over the runs of those points
    ci: tuple[float, float] | None = None  # its 95 % interval (two runs or more)
    runs: int = 0
    unit: str | None = None          # the unit of the stored results
    ratio: float | None = None       # measured / published value
    verdict: str = "no runs"
    why: str = ""

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
    values = [run.values[ref.metric] for work in read for run in work.stored if ref.metric in run.values]
    units = {run.units[ref.metric] for work in read for run in work.stored if ref.metric in run.units}
    if not values:
        skipped = [work for work in read if work.skip]
        if len(skipped) == len(read):
            row.verdict, row.why = "skipped", skipped[0].skip or ""
        return row
    stats = summarize(values)
    row.runs, row.measured = stats.n, stats.mean
    row.ci = (stats.ci_low, stats.ci_high) if stats.ci_low is not None and stats.ci_high is not None else None
    row.unit = ", ".join(sorted(units))
    published_unit = UNIT_ALIASES.get(ref.unit or "", ref.unit)
    if units and units != {published_unit}:
        row.verdict, row.why = "unit differs", f"{row.unit} here, {ref.unit} published"
        return row
    if ref.value is not None and ref.value:
        row.ratio = row.measured / ref.value
    if len(read) > 1:
        row.why = f"mean over {len(read)} points"
    if ref.check == "informational":
        # the reference's first clause; the whole reason is in `dlrun experiments show`
        row.verdict = "informational"
        row.why = "compared, never judged: " + re.split(r"[:;.]\s", (ref.ambiguous or ref.note or "").strip())[0]
    else:
        row.verdict = "within" if _holds(ref, row.measured) else "outside"
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
    if got.units and len(got.units) > 1:
        row.verdict, row.why = "unit differs", f"the operands are in {', '.join(sorted(got.units))}"
        return row
    if ref.value:
        row.ratio = got.value / ref.value
    row.why = f"a {ref.derive.op} computed from {got.runs} runs of {len(read)} points"
    if ref.check == "informational":
        row.verdict = "informational"
    else:
        row.verdict = "within" if _holds(ref, got.value) else "outside"
    return row


def _holds(ref: Reference, measured: float) -> bool:
    assert ref.tolerance is not None  # a judged quantitative reference has one (ExperimentSpec checks)
    if ref.range is not None:
        low, high = ref.range
        bound = ref.tolerance.absolute if ref.tolerance.absolute is not None else 0.0
        relative = ref.tolerance.relative or 0.0
        return low * (1 - relative) - bound <= measured <= high * (1 + relative) + bound
    published = float(ref.value)  # type: ignore[arg-type]
    if ref.check == "at-most":
        return measured <= published or ref.tolerance.allows(published, measured)
    if ref.check == "at-least":
        return measured >= published or ref.tolerance.allows(published, measured)
    return ref.tolerance.allows(published, measured)
