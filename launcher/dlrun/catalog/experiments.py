"""Experiments of the source documents as data: the matrix a paper ran, and what it published about it.

An experiment names its document and where in it, the axes the paper swept (each value as the paper wrote
it and the dlrun value it maps to), the systems it ran on, the points the paper left out, how long each run
is, what dlrun had to choose where the paper was silent (deviations), and the published numbers
(references) with their quotes, conditions and tolerances. `dlrun.catalog.experiment_points` expands the
matrix into runs; compare checks results against the references. The axis and metric names are fixed
vocabularies (`dlrun.catalog.experiment_vocabulary`).

Conditions (`when`, reference `conditions`, direction sides) are `axis: value` or `axis: [values]`; a value is
matched against the axis value's paper label first, then its dlrun value; the key `system` names dlrun
systems.
"""
from __future__ import annotations

from typing import Literal, Union

from pydantic import Field, field_validator, model_validator

from dlrun.catalog.experiment_vocabulary import AXES, COUNT_AXES, METRICS, WORKLOAD_AXES, capability_problem
from dlrun.catalog.models import NAME_PATTERN, Strict
from dlrun.errors import unquoted
from dlrun.runoptions import PRECISIONS

Scalar = Union[int, float, str]
Conditions = dict[str, Union[Scalar, list[Scalar]]]
AxisName = Literal[tuple(AXES)]  # type: ignore[valid-type]
Metric = Literal[tuple(METRICS)]  # type: ignore[valid-type]


class Document(Strict):
    """The source document. `name` is how sources cite it (e.g. "Ren et al. (BNL)")."""

    name: str
    title: str
    authors: str


class AxisValue(Strict):
    """One value of an axis: as the paper wrote it, the dlrun value it maps to, or why there is none."""

    paper: Scalar
    dlrun: Scalar | None = None
    missing: str | None = None  # why dlrun has no value for it (dlrun must then be null)
    note: str | None = None

    @model_validator(mode="after")
    def _mapped_or_missing(self):
        if (self.dlrun is None) == (self.missing is None):
            raise ValueError("give exactly one of dlrun (the value dlrun uses) or missing (why it has none)")
        return self

    def matches(self, value: Scalar) -> bool:
        return _same(value, self.paper) or (self.dlrun is not None and _same(value, self.dlrun))


def _same(a: Scalar, b: Scalar) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return str(a) == str(b)
    return float(a) == float(b)


class Axis(Strict):
    name: AxisName  # type: ignore[valid-type]
    # A bare value (`- 8`) stands for `{paper: 8, dlrun: 8}`: the paper's value is dlrun's. Written as a union
    # so that the JSON Schema of the model admits what the YAML may hold.
    values: list[Union[AxisValue, int, float, str]] = Field(min_length=1)
    note: str | None = None

    @field_validator("values")
    @classmethod
    def _bare_values(cls, values: list) -> list[AxisValue]:
        return [v if isinstance(v, AxisValue) else AxisValue(paper=v, dlrun=v) for v in values]

    @model_validator(mode="after")
    def _typed_values(self):
        for value in self.values:
            if value.dlrun is None:
                continue
            if self.name in COUNT_AXES and not (isinstance(value.dlrun, int) and value.dlrun > 0):
                raise ValueError(f"{self.name}: dlrun value {value.dlrun!r} must be a positive integer")
            if self.name == "fabric" and value.dlrun not in ("ib", "opa", "roce", "tcp"):
                raise ValueError(f"fabric: dlrun value {value.dlrun!r} is not a fabric; valid: ib, opa, roce, tcp")
            if self.name == "precision" and value.dlrun not in PRECISIONS:
                raise ValueError(f"precision: dlrun value {value.dlrun!r}; valid: {', '.join(PRECISIONS)}")
        return self

    def find(self, value: Scalar) -> AxisValue | None:
        return next((v for v in self.values if v.matches(value)), None)


class Quote(Strict):
    """Where a published number or finding stands: document (default: the experiment's), place, exact words."""

    doc: str | None = None
    where: str = Field(min_length=1)
    quote: str = Field(min_length=1)

    @field_validator("quote")
    @classmethod
    def _words(cls, value: str) -> str:
        return unquoted(value)  # the marks are added where a quote is shown


class Tolerance(Strict):
    relative: float | None = Field(default=None, gt=0)  # fraction of the published value (0.015 = 1.5 %)
    absolute: float | None = Field(default=None, gt=0)  # in the reference's unit
    why: str = Field(min_length=10)

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

    op: Literal["value", "ratio", "reduction", "gain", "speedup", "scaling-efficiency", "per-node", "time-for-samples"]
    numerator: Conditions = {}
    denominator: Conditions = {}
    baseline: Conditions = {}
    aggregate: Literal["mean", "min", "max"] | None = None
    over: list[str] = []
    samples: float | None = Field(default=None, gt=0)
    with_experiments: list[str] = []

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

    relation: Literal["higher", "lower", "similar", "linear-scaling", "sublinear-scaling"]
    metric: Metric  # type: ignore[valid-type]
    subject: Conditions = {}
    than: Conditions = {}
    where: Conditions = {}           # conditions both sides share
    within: float | None = Field(default=None, gt=0)      # similar: largest relative difference
    axis: Literal["gpus", "nodes", "cpu_cores", "parameter_servers"] | None = None  # scaling: what grows
    up_to: int | None = Field(default=None, gt=0)          # scaling: up to this value of `axis`
    efficiency: float | None = Field(default=None, gt=0, le=1)  # linear: at least; sublinear: below

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

    id: str = Field(pattern=NAME_PATTERN)
    kind: Literal["quantitative", "qualitative"]
    metric: Metric  # type: ignore[valid-type]
    conditions: Conditions = {}
    source: Quote
    also: list[Quote] = []  # the same number stated elsewhere in the document
    # quantitative
    value: float | None = None
    range: tuple[float, float] | None = None  # a published range, e.g. "1.0% ~ 3.7%"
    unit: str | None = None
    check: Literal["value", "at-most", "at-least", "informational"] = "value"
    tolerance: Tolerance | None = None
    derive: Derive | None = None
    # qualitative
    directions: list[Direction] = []
    ambiguous: str | None = None  # what the document leaves unclear about this reference
    note: str | None = None

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


class Rule(Strict):
    """Settings for the points matching `when` (later rules win; axis values win over rules)."""

    when: Conditions = {}
    batch_per_device: int | None = Field(default=None, gt=0)
    steps: int | None = Field(default=None, gt=0)
    warmup_steps: int | None = Field(default=None, ge=0)
    data_workers: int | None = Field(default=None, ge=0)
    ranks_per_node: int | None = Field(default=None, gt=0)
    image: str | None = Field(default=None, pattern=NAME_PATTERN)
    dist: Literal["ddp", "horovod", "fsdp"] | None = None  # --dist (an 8B model's optimizer state needs fsdp)
    grad_accum: int | None = Field(default=None, gt=0)  # --grad-accum: a document's global batch per step
    why: str = Field(min_length=5)


class Exclusion(Strict):
    """Points of the product the paper did not run."""

    when: Conditions = Field(min_length=1)
    why: str = Field(min_length=5)


class RunSettings(Strict):
    steps: int | None = Field(default=None, gt=0)           # timed steps; None: the workload's default
    warmup_steps: int | None = Field(default=None, ge=0)    # excluded from timing; None: the workload's default
    repeats: int = Field(default=1, gt=0)
    why: str = Field(min_length=5)


def _capabilities(names: list[str]) -> list[str]:
    for name in names:
        problem = capability_problem(name)
        if problem:
            raise ValueError(problem)
    return names


class Deviation(Strict):
    """A setting the paper did not state (or dlrun cannot match): what dlrun uses, and why. `lacks`: the
    capabilities whose absence the deviation stands on; `renders`: text dlrun's job for the experiment's
    points contains where the deviation describes it (both checked against the code by the tests)."""

    setting: str
    paper: str = "not stated"
    dlrun: str
    reason: str = Field(min_length=10)
    lacks: list[str] = []
    renders: list[str] = []

    @field_validator("lacks")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        return _capabilities(value)


class Status(Strict):
    """runnable; needs-workload (names the workloads that do not exist yet); needs-feature (dlrun lacks a
    capability the measurement needs); not-reproducible (no software can redo it, e.g. re-cabling)."""

    kind: Literal["runnable", "needs-workload", "needs-feature", "not-reproducible"]
    workloads: list[str] = []
    requires: list[str] = []  # the capabilities the measurement needs (see experiment_vocabulary.CAPABILITIES)
    reason: str | None = None

    @field_validator("requires")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        return _capabilities(value)

    @model_validator(mode="after")
    def _reason(self):
        if self.kind != "runnable" and not self.reason:
            raise ValueError(f"status {self.kind} needs a reason")
        if (self.kind == "needs-workload") != bool(self.workloads):
            raise ValueError("workloads goes with status needs-workload, and it needs them")
        return self


class ExperimentSpec(Strict):
    id: str = Field(pattern=NAME_PATTERN)
    title: str
    document: Document
    where: str
    description: str
    measure: Literal["training", "collective", "model-facts", "other"]
    device: Literal["gpu", "cpu"] = "gpu"
    systems: list[str] = []
    image: str | None = Field(default=None, pattern=NAME_PATTERN)  # default: each system's default image
    axes: list[Axis] = Field(min_length=1)
    exclusions: list[Exclusion] = []
    run: RunSettings | None = None
    settings: list[Rule] = []
    references: list[Reference] = []
    deviations: list[Deviation] = []
    status: Status
    ambiguous: str | None = None  # what the document leaves unclear about the experiment as a whole
    note: str | None = None

    @property
    def name(self) -> str:  # catalogs key entries by name
        return self.id

    @model_validator(mode="before")
    @classmethod
    def _default_quote_document(cls, data):
        if not isinstance(data, dict) or not isinstance(data.get("document"), dict):
            return data
        doc = data["document"].get("name")
        for ref in data.get("references") or []:
            for quote in [ref.get("source")] + list(ref.get("also") or []) if isinstance(ref, dict) else []:
                if isinstance(quote, dict) and not quote.get("doc"):
                    quote["doc"] = doc
        return data

    @model_validator(mode="after")
    def _consistent(self):
        names = [axis.name for axis in self.axes]
        if len(set(names)) != len(names):
            raise ValueError(f"axes: each axis once; got {', '.join(names)}")
        if not any(name in WORKLOAD_AXES for name in names) and self.measure != "other":
            raise ValueError(f"a {self.measure} experiment needs a model, collective or application axis")
        if self.measure == "model-facts" and self.systems:
            raise ValueError("model-facts are counted from the harness's models, on no system: leave systems empty")
        if not self.systems and self.measure != "model-facts" and self.status.kind != "not-reproducible":
            raise ValueError("systems: name the dlrun systems the experiment ran on")
        ids = [ref.id for ref in self.references]
        if len(set(ids)) != len(ids):
            raise ValueError("references: ids must be unique within the experiment")
        return self

    def axis(self, name: str) -> Axis | None:
        return next((axis for axis in self.axes if axis.name == name), None)

    def workload_names(self) -> list[str]:
        return [str(v.dlrun) for axis in self.axes if axis.name in WORKLOAD_AXES for v in axis.values
                if v.dlrun is not None]

    def reference_counts(self) -> tuple[int, int]:
        quantitative = sum(1 for ref in self.references if ref.kind == "quantitative")
        return quantitative, len(self.references) - quantitative
