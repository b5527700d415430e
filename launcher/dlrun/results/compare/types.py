"""What compare takes and returns, as data: references, modes and axes, and the comparison itself."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from dlrun.errors import DlrunError, unquoted
from dlrun.results.key import MACHINE_FIELDS, STACK_FIELDS
from dlrun.results.compare.stats import METHOD

#: Modes, and the axis each compares along when `--by` is not given (None: no axis).
MODES: dict[str, str | None] = {"summary": None, "reference": None, "relative": "system", "scaling": "devices",
                                "fabrics": "fabric", "regression": "image", "history": None}
#: The mode an axis implies when no mode is given.
MODE_OF_AXIS = {"system": "relative", "site": "relative", "host": "relative", "devices": "scaling",
                "fabric": "fabrics"}
_MACHINE = frozenset(MACHINE_FIELDS)


@dataclass(frozen=True)
class Axis:
    """What a comparison varies: the key field that gives each run its place on the axis (`host` is the
    machine: its key fields in a few words, dlrun.results.key.machine_label), and the key fields allowed to
    differ along it. Only the site, host and system axes let the site and the machine differ."""

    name: str
    field: str
    varies: frozenset[str]


AXES: dict[str, Axis] = {axis.name: axis for axis in (
    Axis("system", "system", frozenset({"system", "fabric", "site"}) | _MACHINE),
    Axis("site", "site", frozenset({"site", "system", "fabric"}) | _MACHINE),
    Axis("host", "host", _MACHINE),
    Axis("devices", "devices", frozenset({"devices", "nodes", "global_batch", "fabric", "fabric_rate"})),
    Axis("fabric", "fabric", frozenset({"fabric", "fabric_rate"})),
    Axis("image", "image_digest", frozenset({"image_digest", "framework_version", *STACK_FIELDS})),
    Axis("framework-version", "framework_version", frozenset({"framework_version", "image_digest", *STACK_FIELDS})),
    Axis("precision", "precision", frozenset({"precision"})),
    Axis("batch", "batch_per_device", frozenset({"batch_per_device", "global_batch"})),
    Axis("data", "data", frozenset({"data", "data_format"})),
    # the directory a storage (or command) run read, `path:DIR`, and its file system: Lustre against NVMe
    Axis("data-path", "data", frozenset({"data", "data_format"})),
)}
#: Which modes an axis may be used with.
AXIS_MODES = {"relative": ("system", "site", "host"), "scaling": ("devices",), "fabrics": ("fabric",),
              "regression": tuple(AXES)}
#: Key fields that split a comparison into rows (series); each mode compares along its axis within a row.
SERIES: dict[str, tuple[str, ...]] = {
    "relative": ("workload", "model", "devices"),   # Ren et al. Table III: models x GPU counts
    "scaling": ("workload", "model"),                # PRACE guide Tables 8 and 9: one row per GPU count
    "fabrics": ("workload", "model", "devices"),
    "regression": ("workload", "model", "devices"),
}


def series_for(mode: str, axis: Axis) -> tuple[str, ...]:
    """The row fields of `mode` along `axis`: a field the axis varies cannot also split rows."""
    return tuple(name for name in SERIES[mode] if name not in axis.varies)


def sort_value(value: Any) -> tuple:
    """Numbers in numeric order, before text in text order."""
    return (0, value, "") if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, 0, str(value))


@dataclass(frozen=True)
class Source:
    """Where a published number comes from: document, table/figure/section, and the quoted words."""

    doc: str
    where: str = ""
    quote: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "quote", unquoted(self.quote))


@dataclass(frozen=True)
class Reference:
    """A published value runs are compared against.

    `match`: key fields (see dlrun.results.key) that pick the runs it applies to, e.g. {"devices": 8};
    empty: every selected run. `conditions`: key fields the publication states about its own run
    (precision, batch per device, framework ...): a run that differs in one is not like-for-like with it.
    `tolerance` is relative (0.05 = within 5 %)."""

    value: float
    unit: str
    tolerance: float
    source: Source
    match: dict[str, Any] = field(default_factory=dict)
    conditions: dict[str, Any] = field(default_factory=dict)
    label: str = ""

    def __post_init__(self) -> None:
        if not self.value > 0:
            raise DlrunError(f"a reference value must be > 0, got {self.value}", exit_code=2)
        if not 0 <= self.tolerance < 1:
            raise DlrunError(f"a reference tolerance is a fraction in [0, 1), got {self.tolerance}", exit_code=2)


class MismatchError(DlrunError):
    """The selected runs are not like-for-like; the message lists every difference."""

    exit_code = 1

    def __init__(self, differences: list[str], hint: str | None = None):
        self.differences = differences
        lines = "\n".join(f"  {line}" for line in differences)
        super().__init__(f"the runs are not like-for-like ({len(differences)} "
                         f"difference{'s' if len(differences) != 1 else ''}):\n{lines}\n"
                         + (f"{hint}\n" if hint else "")
                         + "compare them anyway with --allow-mismatch (the output is then marked "
                         "'not like-for-like')")


@dataclass
class Comparison:
    """A comparison as data: rows with named columns (the CLI prints them as a table, JSON or CSV).

    `summary_rows` hold averages over rows (Ren et al.'s "Average", Samsi et al.'s average reduction: the
    geometric mean of the rows' ratios); `differences` is empty exactly when the comparison is like-for-like;
    `statistics` says how every estimate and interval was made (dlrun.results.compare.stats.METHOD). `sites` and
    `machines` are those of the compared runs (dlrun.results.key.machine_label), `quality` their verdicts
    (verdict -> runs), and every row carries its point's verdict (`quality`, `quality_reasons`:
    dlrun.results.compare.verdicts)."""

    mode: str
    title: str
    columns: list[str]
    rows: list[dict[str, Any]]
    axis: str | None = None
    baseline: Any = None
    unit: str | None = None
    summary_rows: list[dict[str, Any]] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    statistics: dict[str, Any] = field(default_factory=lambda: dict(METHOD))
    sites: list[str] = field(default_factory=list)
    machines: list[str] = field(default_factory=list)
    quality: dict[str, int] = field(default_factory=dict)

    @property
    def like_for_like(self) -> bool:
        return not self.differences

    def to_dict(self) -> dict[str, Any]:
        # a shallow copy: asdict would deep-copy every run id of every row (100,000 of them in a big store)
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["like_for_like"] = self.like_for_like
        return data
