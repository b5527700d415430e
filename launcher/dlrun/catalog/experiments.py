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

from dlrun.catalog.experiment_references import (  # noqa: F401 (the experiment's parts, read from here too)
    CONDITIONS, Conditions, Derive, Direction, Metric, Quote, Reference, Scalar, Tolerance)
from dlrun.catalog.experiment_vocabulary import AXES, COUNT_AXES, WORKLOAD_AXES, capability_problem
from dlrun.catalog.models import NAME_PATTERN, Strict
from dlrun.runoptions import PRECISIONS

AxisName = Literal[tuple(AXES)]  # type: ignore[valid-type]


class Document(Strict):
    """The source document. `name` is how sources cite it (e.g. "Ren et al. (BNL)")."""

    name: str = Field(description="How sources cite it, e.g. `Ren et al. (BNL)`.")
    title: str = Field(description="Its title.")
    authors: str = Field(description="Its authors.")


class AxisValue(Strict):
    """One value of an axis: as the paper wrote it, the dlrun value it maps to, or why there is none."""

    paper: Scalar = Field(description="The value as the paper wrote it (conditions and point ids use it).")
    dlrun: Scalar | None = Field(default=None, description=(
        "The dlrun value it maps to (a workload, a count, a fabric, a precision, ...); exactly one of dlrun and "
        "missing."))
    missing: str | None = Field(default=None, description=(
        "Why dlrun has no value for it: its points are skipped with this reason."))
    note: str | None = Field(default=None, description="How the mapping was made, or what to know about it.")

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
    """One axis the paper swept: the points are the product of the axes' values, less the exclusions."""

    name: AxisName = Field(description="Which axis, and what its dlrun value is: " + "; ".join(  # type: ignore
        f"{name}: {what}" for name, what in AXES.items()) + ".")
    # Written as a union so that the JSON Schema of the model admits what the YAML may hold.
    values: list[Union[AxisValue, int, float, str]] = Field(min_length=1, description=(
        "Its values; a bare value (`- 8`) stands for `{paper: 8, dlrun: 8}`: the paper's value is dlrun's."))
    note: str | None = Field(default=None, description="What to know about the axis.")

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
            if self.name == "partition" and not isinstance(value.dlrun, str):
                raise ValueError(f"partition: dlrun value {value.dlrun!r} must be a partition's name")
            if self.name == "fabric" and value.dlrun not in ("ib", "opa", "roce", "tcp"):
                raise ValueError(f"fabric: dlrun value {value.dlrun!r} is not a fabric; valid: ib, opa, roce, tcp")
            if self.name == "precision" and value.dlrun not in PRECISIONS:
                raise ValueError(f"precision: dlrun value {value.dlrun!r}; valid: {', '.join(PRECISIONS)}")
        return self

    def find(self, value: Scalar) -> AxisValue | None:
        return next((v for v in self.values if v.matches(value)), None)


class Rule(Strict):
    """Settings for the points matching `when` (later rules win; axis values win over rules)."""

    when: Conditions = Field(default={}, description=f"The points it applies to, {CONDITIONS}; none: all.")
    batch_per_device: int | None = Field(default=None, gt=0, description="Batch per rank (--batch-size).")
    steps: int | None = Field(default=None, gt=0, description="Timed steps (--steps).")
    warmup_steps: int | None = Field(default=None, ge=0, description="Untimed warm-up steps (--warmup-steps).")
    data_workers: int | None = Field(default=None, ge=0, description="Data-loader workers per rank (--data-workers).")
    ranks_per_node: int | None = Field(default=None, gt=0, description="Ranks per node (--ranks-per-node).")
    image: str | None = Field(default=None, pattern=NAME_PATTERN, description="The image (--image).")
    dist: Literal["ddp", "horovod", "fsdp"] | None = Field(default=None, description=(
        "How training is distributed (--dist; an 8B model's optimizer state needs fsdp)."))
    grad_accum: int | None = Field(default=None, gt=0, description=(
        "Micro-batches per optimizer step (--grad-accum): a document's global batch per step."))
    why: str = Field(min_length=5, description="Why these settings (the paper's words, or dlrun's reason).")


class Exclusion(Strict):
    """Points of the product the paper did not run."""

    when: Conditions = Field(min_length=1, description=f"The points left out, {CONDITIONS}.")
    why: str = Field(min_length=5, description="Why the paper did not run them.")


class RunSettings(Strict):
    """How long each point's run is, and how often it is repeated."""

    steps: int | None = Field(default=None, gt=0, description="Timed steps; none: the workload's default.")
    warmup_steps: int | None = Field(default=None, ge=0, description=(
        "Untimed warm-up steps; none: the workload's default."))
    repeats: int = Field(default=1, gt=0, description=(
        "Runs of each point `dlrun reproduce` wants in the store (--repeats overrides)."))
    why: str = Field(min_length=5, description="Why these numbers.")


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

    setting: str = Field(description="The setting, e.g. `batch per GPU` or `warm-up iterations`.")
    paper: str = Field(default="not stated", description="What the paper says of it.")
    dlrun: str = Field(description="What dlrun uses.")
    reason: str = Field(min_length=10, description="Why.")
    lacks: list[str] = Field(default=[], description=(
        "The capabilities dlrun lacks that the deviation stands on (a check fails once dlrun has one of them)."))
    renders: list[str] = Field(default=[], description=(
        "Text the job dlrun renders for the experiment's points contains where the deviation describes it."))

    @field_validator("lacks")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        return _capabilities(value)


class Status(Strict):
    """runnable; needs-workload (names the workloads that do not exist yet); needs-feature (dlrun lacks a
    capability the measurement needs); not-reproducible (no software can redo it, e.g. re-cabling)."""

    kind: Literal["runnable", "needs-workload", "needs-feature", "not-reproducible"] = Field(description=(
        "The status as declared; it reads runnable once the workloads or capabilities it waits for exist."))
    workloads: list[str] = Field(default=[], description="needs-workload: the workloads that do not exist yet.")
    requires: list[str] = Field(default=[], description=(
        "The capabilities the measurement needs (dlrun.catalog.experiment_vocabulary.CAPABILITIES)."))
    reason: str | None = Field(default=None, description="Why it is not runnable (needed unless runnable).")

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
    """One experiment of a source document: the matrix it ran and what it published about it."""

    id: str = Field(pattern=NAME_PATTERN, description="Its id, as `dlrun reproduce ID` takes it.")
    title: str = Field(description="What it measures, in a line.")
    document: Document = Field(description="The source document.")
    where: str = Field(description="Where in the document: its tables, figures or sections.")
    description: str = Field(description="What the paper did, in words.")
    measure: Literal["training", "collective", "model-facts", "other"] = Field(description=(
        "What its points measure: training or collective runs; model-facts: parameters and multiply-adds counted "
        "from the harness's models, on no system; other."))
    device: Literal["gpu", "cpu"] = Field(default="gpu", description=(
        "What a point runs on: gpu (a point needs GPUs; counts are of GPUs; a `partition` axis's partition without "
        "GPUs runs on its CPUs) or cpu."))
    systems: list[str] = Field(default=[], description="The dlrun systems it ran on.")
    image: str | None = Field(default=None, pattern=NAME_PATTERN, description=(
        "The image its points run; none: each system's default image."))
    axes: list[Axis] = Field(min_length=1, description="The axes the paper swept.")
    exclusions: list[Exclusion] = Field(default=[], description="Points of the product the paper did not run.")
    run: RunSettings | None = Field(default=None, description="How long each run is, and how often.")
    settings: list[Rule] = Field(default=[], description=(
        "Settings for the points matching each rule (later rules win; axis values win over rules)."))
    references: list[Reference] = Field(default=[], description=(
        "The published numbers and findings it is checked against."))
    deviations: list[Deviation] = Field(default=[], description=(
        "Settings the paper did not state, or dlrun cannot match: what dlrun uses, and why."))
    status: Status = Field(description="Whether dlrun can run it, and if not, why.")
    ambiguous: str | None = Field(default=None, description=(
        "What the document leaves unclear about the experiment as a whole."))
    note: str | None = Field(default=None, description="What else to know about it.")

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
