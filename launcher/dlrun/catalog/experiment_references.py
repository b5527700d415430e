"""What a source document published about an experiment's points: each number or finding (a reference) with its
quote, the tolerance it is judged with, how it is derived from several points, and the machine-checkable readings
of a finding; and the conditions (`axis: value` or `axis: [values]`, the key `system` naming dlrun systems) that
select the points they are about. `dlrun.catalog.experiments` holds them in an experiment."""
from __future__ import annotations

from typing import Literal, Union

from pydantic import Field, field_validator, model_validator

from dlrun.catalog.experiment_vocabulary import METRICS
from dlrun.catalog.models import NAME_PATTERN, Strict
from dlrun.errors import unquoted

Scalar = Union[int, float, str]
Conditions = dict[str, Union[Scalar, list[Scalar]]]
Metric = Literal[tuple(METRICS)]  # type: ignore[valid-type]
#: How the fields that select points write them; a value is matched against an axis value's paper label first.
CONDITIONS = ("as `axis: value` or `axis: [values]`, a value as the paper wrote it or as dlrun runs it (the key "
              "`system` names dlrun systems)")


class Quote(Strict):
    """Where a published number or finding stands: document (default: the experiment's), place, exact words."""

    doc: str | None = Field(default=None, description="The document; none: the experiment's own.")
    where: str = Field(min_length=1, description="Where in it: table, figure, section or page.")
    quote: str = Field(min_length=1, description="The exact words, without quotation marks.")

    @field_validator("quote")
    @classmethod
    def _words(cls, value: str) -> str:
        return unquoted(value)  # the marks are added where a quote is shown


class Tolerance(Strict):
    """How far a measured value may lie from the published one and still agree (exactly one of relative and
    absolute)."""

    relative: float | None = Field(default=None, gt=0, description="A fraction of the published value (0.015 = 1.5 %).")
    absolute: float | None = Field(default=None, gt=0, description="In the reference's unit.")
    why: str = Field(min_length=10, description="Why this much.")

    @model_validator(mode="after")
    def _one(self):
        if (self.relative is None) == (self.absolute is None):
            raise ValueError("give exactly one of relative or absolute")
        return self

    def allows(self, published: float, measured: float) -> bool:
        bound = self.absolute if self.absolute is not None else abs(published) * float(self.relative or 0)
        return abs(measured - published) <= bound + 1e-12 * max(1.0, abs(published))


class Derive(Strict):
    """How compare computes the published quantity from measured points.

    value: the metric itself (with `aggregate`); ratio: numerator / denominator (x100 with unit %);
    reduction: 100 x (1 - numerator / denominator); gain: 100 x (the reference's points / baseline - 1);
    speedup: the reference's points / baseline; scaling-efficiency: 100 x speedup / (scale / baseline scale);
    per-node: value / nodes; time-for-samples: samples / throughput. `aggregate` averages (or takes the
    extreme of) the per-point values over the axes in `over`; `with_experiments` adds those experiments'
    points (a table that spans two experiments)."""

    op: Literal["value", "ratio", "reduction", "gain", "speedup", "scaling-efficiency", "per-node",
                "time-for-samples"] = Field(description="The operation (see above).")
    numerator: Conditions = Field(default={}, description=(
        f"ratio, reduction: the numerator's points, {CONDITIONS}, over the reference's conditions."))
    denominator: Conditions = Field(default={}, description="ratio, reduction: the denominator's points, as numerator.")
    baseline: Conditions = Field(default={}, description=(
        "gain, speedup, scaling-efficiency: the baseline's points, as numerator."))
    aggregate: Literal["mean", "min", "max"] | None = Field(default=None, description=(
        "Average the per-point values (or take the smallest or largest) over the axes in `over`."))
    over: list[str] = Field(default=[], description="The axes `aggregate` runs over.")
    samples: float | None = Field(default=None, gt=0, description="time-for-samples: how many samples.")
    with_experiments: list[str] = Field(default=[], description=(
        "Other experiments whose points are added (a table that spans two experiments)."))

    @model_validator(mode="after")
    def _operands(self):
        if self.op in ("ratio", "reduction") and not (self.numerator and self.denominator):
            raise ValueError(f"{self.op} needs numerator and denominator conditions")
        if self.op in ("gain", "speedup", "scaling-efficiency") and not self.baseline:
            raise ValueError(f"{self.op} needs baseline conditions")
        if (self.op == "time-for-samples") != (self.samples is not None):
            raise ValueError("samples goes with op time-for-samples, and only with it")
        if self.op == "value" and not self.aggregate:
            raise ValueError("op value is the metric itself: it needs an aggregate (mean, min or max) over axes")
        if bool(self.aggregate) != bool(self.over):
            raise ValueError("aggregate and over go together (which axes the aggregate runs over)")
        return self


class Direction(Strict):
    """A machine-checkable reading of a finding: subject higher/lower/similar than `than`, or a scaling shape."""

    relation: Literal["higher", "lower", "similar", "linear-scaling", "sublinear-scaling"] = Field(description=(
        "higher, lower, similar: `subject` against `than`; linear-scaling, sublinear-scaling: the metric over "
        "`axis` up to `up_to`."))
    metric: Metric = Field(description="The metric compared.")  # type: ignore[valid-type]
    subject: Conditions = Field(default={}, description=f"The points the finding is about, {CONDITIONS}.")
    than: Conditions = Field(default={}, description="higher, lower, similar: the points they are compared with.")
    where: Conditions = Field(default={}, description="Conditions both sides share.")
    within: float | None = Field(default=None, gt=0, description="similar: the largest relative difference.")
    axis: Literal["gpus", "nodes", "cpu_cores", "parameter_servers"] | None = Field(default=None, description=(
        "Scaling: the axis that grows."))
    up_to: int | None = Field(default=None, gt=0, description="Scaling: up to this value of `axis`.")
    efficiency: float | None = Field(default=None, gt=0, le=1, description=(
        "Scaling efficiency: linear-scaling at least this, sublinear-scaling below it."))

    @model_validator(mode="after")
    def _shape(self):
        if self.relation in ("higher", "lower", "similar"):
            if not (self.subject and self.than):
                raise ValueError(f"{self.relation} needs subject and than conditions")
            if (self.relation == "similar") != (self.within is not None):
                raise ValueError("within goes with relation similar, and only with it")
        elif not (self.axis and self.up_to and self.efficiency):
            raise ValueError(f"{self.relation} needs axis, up_to and efficiency")
        return self

    def sides(self) -> list[Conditions]:
        return [{**self.where, **self.subject}, {**self.where, **self.than}] if self.than else [
            {**self.where, **self.subject}]


class Reference(Strict):
    """A published number (quantitative) or finding (qualitative), with its source and how to check it."""

    id: str = Field(pattern=NAME_PATTERN, description="Its id within the experiment.")
    kind: Literal["quantitative", "qualitative"] = Field(description=(
        "quantitative: a published number, judged against the measured one; qualitative: a finding in words."))
    metric: Metric = Field(description="What it is a number of: " + "; ".join(  # type: ignore[valid-type]
        f"{name}: {what}" for name, what in METRICS.items()) + ".")
    conditions: Conditions = Field(default={}, description=f"The points it is about, {CONDITIONS}; none: all.")
    source: Quote = Field(description="Where it is published, in its words.")
    also: list[Quote] = Field(default=[], description="The same number stated elsewhere in the document.")
    value: float | None = Field(default=None, description="quantitative: the published number (or a range).")
    range: tuple[float, float] | None = Field(default=None, description=(
        "quantitative: a published range, low and high, e.g. for `1.0% ~ 3.7%` (or a value)."))
    unit: str | None = Field(default=None, description="quantitative: the unit of value or range.")
    check: Literal["value", "at-most", "at-least", "informational"] = Field(default="value", description=(
        "value: the measured value agrees within the tolerance; at-most: it is not above the published value "
        "plus the tolerance; at-least: not below it less the tolerance; informational: compared, never judged."))
    tolerance: Tolerance | None = Field(default=None, description=(
        "quantitative, judged: how far the measured value may lie."))
    derive: Derive | None = Field(default=None, description=(
        "How the published quantity is computed from measured points; none: the points' metric itself."))
    directions: list[Direction] = Field(default=[], description=(
        "qualitative: the finding as machine-checkable readings (their sides are among the points the reference "
        "reads)."))
    ambiguous: str | None = Field(default=None, description="What the document leaves unclear about this reference.")
    note: str | None = Field(default=None, description="What else to know about it.")

    @model_validator(mode="after")
    def _kind_fields(self):
        if self.kind == "qualitative":
            if self.value is not None or self.range is not None or self.tolerance or self.derive:
                raise ValueError("a qualitative reference has a quote (and directions), no value or tolerance")
            return self
        if (self.value is None) == (self.range is None):
            raise ValueError("a quantitative reference needs exactly one of value or range")
        if not self.unit:
            raise ValueError("a quantitative reference needs its unit")
        if self.range is not None and self.range[0] > self.range[1]:
            raise ValueError(f"range {list(self.range)}: low above high")
        if self.check == "informational":
            if self.tolerance is not None or not (self.note or self.ambiguous):
                raise ValueError("an informational reference has no tolerance; say in note or ambiguous why")
        elif self.tolerance is None:
            raise ValueError("a quantitative reference needs a tolerance, with why")
        return self

    def point_sets(self) -> list[Conditions]:
        """The groups of points this reference reads: both operands of a ratio, its own points and the
        baseline of a speedup or gain, both sides of each direction; else the points its conditions select."""
        sets: list[Conditions] = []
        derive = self.derive
        if derive is not None and derive.numerator:
            sets += [{**self.conditions, **derive.numerator}, {**self.conditions, **derive.denominator}]
        elif derive is not None and derive.baseline:
            sets += [self.conditions, {**self.conditions, **derive.baseline}]
        for direction in self.directions:
            sets += [{**self.conditions, **side} for side in direction.sides()]
        return sets or [self.conditions]
