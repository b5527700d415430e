"""From the store to cells: groups of runs with one key (grouped in SQL), placed by series and axis value,
and the like-for-like guard over them."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from dlrun.errors import DlrunError, UsageError, closest
from dlrun.results.key import KEY_FIELDS, MACHINE_FIELDS, UNKNOWN, machine_label
from dlrun.results.compare.key_diff import spread
from dlrun.results.store.query import Filters
from dlrun.results.store import Store
from dlrun.results.store.samples import LISTED
from dlrun.results.moments import Sample, pooled

from dlrun.results.compare import measured
from dlrun.results.compare.types import Axis, sort_value


@dataclass
class Group:
    """Successful runs with one key (and one site when comparing sites), as the store grouped them."""

    key: dict[str, Any]
    key_hash: str
    site: str | None
    metric: str
    unit: str
    run_ids: list[str]        # every run's id, or (from the store's aggregates) the newest samples.LISTED
    values: list[float] | Sample
    images: list[str] = field(default_factory=list)
    #: runs left out because their value is no rate (zero, negative or not finite)
    dropped: list[str] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)  # each run's quality verdict, in run_ids' order
    #: runs left out because they lack the compared value (measured.UNMEASURED): why -> run ids
    unmeasured: dict[str, list[str]] = field(default_factory=dict)
    #: verdict -> runs (all of them, listed or not)
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.counts:
            for verdict in self.verdicts or ["unknown"] * len(self.values):
                self.counts[verdict] = self.counts.get(verdict, 0) + 1

    def axis_value(self, axis: Axis | None) -> Any:
        if axis is None:
            return None
        if axis.field == "host":
            return machine_label(self.key)
        return self.site if axis.field == "site" else self.key.get(axis.field, UNKNOWN)


@dataclass
class Cell:
    """The runs at one place of a comparison: one series (row), one axis value (column)."""

    series: tuple
    axis_value: Any
    groups: list[Group] = field(default_factory=list)

    @property
    def values(self) -> list[float] | Sample:
        return pooled(g.values for g in self.groups)

    @property
    def run_ids(self) -> list[str]:
        return sorted(r for g in self.groups for r in g.run_ids)

    @property
    def unit(self) -> str:
        return self.groups[0].unit

    @property
    def key(self) -> dict[str, Any]:
        """The key of the cell's first group (all groups share it, unless mismatches were allowed)."""
        return self.groups[0].key

    def field_values(self, name: str) -> list[Any]:
        return sorted({g.key.get(name) for g in self.groups}, key=str)


def load_groups(store: Store, filters: Filters, by_site: bool = False, compared: str = "rate",
                summed: bool = False) -> list[Group]:
    """The selected successful runs grouped by key (and site), with positive finite values only; a run that
    lacks the compared value (`--metric`) is set aside with the reason. With `summed`, from the store's
    aggregates where they can answer (Store.summed_groups): each group's values are then a Sample and its
    run ids the newest samples.LISTED; the statistics are the same to the last bit."""
    rows = store.summed_groups(filters, by_site=by_site, compared=compared) if summed else None
    if rows is not None:
        return _summed_groups(store, rows)
    return _row_groups(store.grouped_values(filters, by_site=by_site, compared=compared), compared)


def _row_groups(rows: list[dict[str, Any]], compared: str) -> list[Group]:
    groups = []
    dropped_only: list[str] = []
    unmeasured_only: dict[str, list[str]] = {}
    for row in rows:
        if row["key"] is None:  # written around the store (no key): it can only be unknown
            row["key"] = {name: UNKNOWN for name in KEY_FIELDS}
            row["key_hash"] = "unknown"
        verdicts = row.get("verdicts") or ["unknown"] * len(row["run_ids"])
        kept = [(run_id, value, verdict) for run_id, value, verdict in zip(row["run_ids"], row["values"], verdicts)
                if math.isfinite(value) and value > 0]
        missing = measured.unmeasured(row["run_ids"], row["values"])
        dropped = sorted(set(row["run_ids"]) - {run_id for run_id, _, _ in kept} - {r for m in missing.values()
                                                                                      for r in m})
        if kept:
            groups.append(Group(row["key"], row["key_hash"], row["site"], *measured.metric_and_unit(compared, row),
                                [r for r, _, _ in kept], [v for _, v, _ in kept], row.get("images") or [], dropped,
                                [q for _, _, q in kept], missing))
        else:
            dropped_only.extend(dropped)
            for why, ids in missing.items():
                unmeasured_only.setdefault(why, []).extend(ids)
    if not groups:
        raise DlrunError("nothing to compare: no successful run with a result matches the selection"
                         + (f" ({len(dropped_only)} with a value that is no rate: zero, negative or not finite)"
                            if dropped_only else "")
                         + "".join(f"; {text}" for text in measured.unmeasured_text(unmeasured_only)))
    return groups


def _summed_groups(store: Store, rows: list[dict[str, Any]]) -> list[Group]:
    groups = []
    dropped_only: list[str] = []
    for row in rows:
        key, key_hash = (json.loads(row["key"]), row["key_hash"]) if row["key"] else (
            {name: UNKNOWN for name in KEY_FIELDS}, "unknown")
        if not row["parts"]:
            dropped_only.extend(row["dropped"])
            continue
        values = Sample(row["moments"], tuple(row["parts"]), store, row["median"])
        groups.append(Group(key, key_hash, row["site"], row["metric"], row["unit"], row["run_ids"], values,
                            row["images"], row["dropped"], counts=dict(row["counts"])))
    if not groups:
        raise DlrunError("nothing to compare: no successful run with a result matches the selection"
                         + (f" ({len(dropped_only)} with a value that is no rate: zero, negative or not finite)"
                            if dropped_only else ""))
    return groups


def listed_note(groups: list[Group]) -> list[str]:
    """Where a point's runs are more than are listed (the store's aggregates list the newest ones)."""
    if not any(len(g.run_ids) < len(g.values) for g in groups):
        return []
    return [f"runs lists the newest {LISTED} run ids of each configuration that has more (n counts them all)"]


def dropped_note(groups: list[Group]) -> list[str]:
    """What load_groups left out, as a note for the comparison (rates are positive: their logs are taken)."""
    dropped = sorted(r for g in groups for r in g.dropped)
    if not dropped:
        return []
    shown = ", ".join(dropped[:6]) + (f" and {len(dropped) - 6} more" if len(dropped) > 6 else "")
    return [f"{len(dropped)} run(s) left out: their value is no rate (zero, negative or not finite): {shown}"]


def place(groups: list[Group], axis: Axis | None, series_fields: tuple[str, ...]) -> dict[tuple, dict[Any, Cell]]:
    """series -> axis value -> cell. Without a series, every key is its own series."""
    cells: dict[tuple, dict[Any, Cell]] = {}
    for group in groups:
        series = tuple(group.key.get(name, UNKNOWN) for name in series_fields) if series_fields \
            else (group.key_hash,)
        value = group.axis_value(axis)
        cells.setdefault(series, {}).setdefault(value, Cell(series, value)).groups.append(group)
    for series, row in cells.items():
        units = sorted({g.unit for cell in row.values() for g in cell.groups})
        if len(units) > 1:
            raise DlrunError(f"cannot compare {' with '.join(units)} in one row "
                             f"({', '.join(str(s) for s in series)}): pick runs of one kind of workload")
    return dict(sorted(cells.items(), key=lambda item: [sort_value(v) for v in item[0]]))


#: Fields that follow from the device count: they may differ between rows of different device counts,
#: but within a row they must match like any other field.
FOLLOW_DEVICES = frozenset({"global_batch", "nodes"})
#: Where a run was made and on what: compared only along an axis that lets them differ, and even then never
#: pooled within one place of that axis (two sites' `localhost` runs are not one system's repeats).
IDENTITY_FIELDS = frozenset({"site", *MACHINE_FIELDS})
_IDENTITY_LABELS = {KEY_FIELDS[name] for name in IDENTITY_FIELDS}


def pooled_identities(differences: list[str]) -> list[str]:
    """The differences that pool runs of different sites or machines (their field is an identity field)."""
    return [line for line in differences
            if any(line.startswith(f"{label}: ") or f": {label}: " in line for label in _IDENTITY_LABELS)]


def _pooled_in_cells(cells: dict[tuple, dict[Any, Cell]], axis: Axis) -> list[str]:
    """Along an axis that lets the site or the machine differ: runs of several sites or machines in one cell."""
    allowed = (set(axis.varies) & IDENTITY_FIELDS) - {axis.field}
    if not allowed:
        return []
    out = []
    for row in cells.values():
        for value, cell in row.items():
            found = spread([(g.key, len(g.values)) for g in cell.groups], ignore=set(KEY_FIELDS) - allowed)
            out += [f"{line} (pooled in {axis.name} {value})" for line in found]
    return list(dict.fromkeys(out))


def guard(cells: dict[tuple, dict[Any, Cell]], axis: Axis | None, series_fields: tuple[str, ...]) -> list[str]:
    """Every reason the runs are not like-for-like for this comparison: key fields outside the axis and
    the row fields that differ or are unknown anywhere, fields that follow from the device count that
    differ within a row, and runs whose place (row, axis value) is unknown."""
    groups = [g for row in cells.values() for cell in row.values() for g in cell.groups]
    varies = set(axis.varies) if axis else set()
    follow = set(FOLLOW_DEVICES) if "devices" in series_fields else set()
    out = spread([(g.key, len(g.values)) for g in groups], ignore=set(series_fields) | varies | follow)
    out += _spread_within_rows(cells, sorted(follow - varies), series_fields)
    out += _unplaced(groups, axis, series_fields)
    if axis is not None:
        out += _pooled_in_cells(cells, axis)
    return out + _unknown_hosts(groups, axis)


def _spread_within_rows(cells: dict[tuple, dict[Any, Cell]], names: list[str],
                        series_fields: tuple[str, ...]) -> list[str]:
    """Fields that follow from the device count and differ within a row."""
    out = []
    for name in names:
        for series, row in cells.items():
            found = spread([(g.key, len(g.values)) for cell in row.values() for g in cell.groups],
                           ignore=set(KEY_FIELDS) - {name})
            where = ", ".join(f"{field} {value}" for field, value in zip(series_fields, series))
            out += [f"{line} (in the row {where})" for line in found]
    return out


def _runs(count: int) -> str:
    return f"{count} run{'s' if count != 1 else ''}"


def _unplaced(groups: list, axis: Axis | None, series_fields: tuple[str, ...]) -> list[str]:
    """Runs whose row or axis value is unknown."""
    out = []
    placing = list(series_fields) + ([axis.field] if axis and axis.field not in ("site", "host") else [])
    for name in placing:
        unknown = sum(len(g.values) for g in groups if g.key.get(name, UNKNOWN) == UNKNOWN)
        if unknown:
            out.append(f"{KEY_FIELDS[name]}: unknown for {_runs(unknown)} "
                       f"(cannot tell where they belong in the comparison)")
    if axis and axis.field == "site":
        missing = sum(len(g.values) for g in groups if not g.site)
        if missing:
            out.append(f"site: unknown for {_runs(missing)}")
    return out


def _unknown_hosts(groups: list, axis: Axis | None) -> list[str]:
    if axis is None or axis.field != "host":
        return []
    missing = sum(len(g.values) for g in groups if g.axis_value(axis) == UNKNOWN)
    return [f"host: the machine is unknown for {_runs(missing)} (cannot tell where they belong in the comparison)"
            ] if missing else []


def axis_label(value: Any, cell_images: list[str]) -> str:
    """How an axis value is shown: an image digest with the image names that carry it."""
    text = str(value)
    if cell_images and (text.startswith("sha256:") or text.startswith("host:")):
        return f"{'/'.join(cell_images)} ({text[:19]})"
    return text


def pick_baseline(axis: Axis, values: list[Any], requested: str | None, images: dict[Any, list[str]]) -> Any:
    """The axis value the others are compared with: the one asked for, else the smallest device count,
    else the first value in sort order. An image may be named by its name or a digest prefix."""
    if requested is None:
        numeric = [v for v in values if isinstance(v, int)]
        return min(numeric) if axis.name == "devices" and numeric else sorted(values, key=str)[0]
    for value in values:
        if str(value) == requested:
            return value
    if axis.name == "image":
        named = _images_named(requested, values, images)
        if named is not None:
            return named
    shown = [str(v) for v in values] + [name for names in images.values() for name in names]
    numbers = [v for v in values if isinstance(v, int)]
    if requested.isdigit() and numbers:  # a count: the nearest count, not the nearest spelling
        hint = str(min(numbers, key=lambda v: (abs(v - int(requested)), v)))
    else:
        hint = closest(requested, shown)
    return _bad_baseline(axis, requested, hint, shown)


def _images_named(requested: str, values: list[Any], images: dict[Any, list[str]]) -> Any:
    """The one image digest `requested` names (an image name or a digest prefix of 12 or more), or None."""
    named = [v for v in values if requested in images.get(v, [])
             or (len(requested) >= 12 and str(v).startswith(requested))]
    if len(named) > 1:
        raise UsageError(f"--baseline {requested!r} names several digests: {', '.join(map(str, named))}; "
                         "give a digest prefix")
    return named[0] if named else None


def _bad_baseline(axis: Axis, requested: str, hint: str | None, shown: list[str]) -> Any:
    did_you_mean = f"; did you mean {hint!r}?" if hint else ";"
    raise UsageError(f"bad --baseline {requested!r}: no selected run has that {axis.name}{did_you_mean} "
                     f"valid: {', '.join(sorted(set(shown)))}")
