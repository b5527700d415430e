"""Published values as data -> checked References (what `--references FILE` and experiment catalogs give).

One entry:
    value: 1402
    unit: images/sec
    tolerance_pct: 10
    label: "8 GPUs"
    source: {doc: "PRACE Best Practice Guide - Deep Learning", where: "Sec. 6.3.4, Table 8", quote: "..."}
    match: {devices: 8}                                  # which runs it applies to (key fields)
    conditions: {precision: fp32, batch_per_device: 64}  # what the publication states about its run
"""
from __future__ import annotations

import math
from typing import Any

from dlrun.errors import UsageError, closest
from dlrun.results.key import KEY_FIELDS

from dlrun.results.compare.types import Reference, Source

ENTRY_FIELDS = ("value", "unit", "tolerance_pct", "label", "source", "match", "conditions")
SOURCE_FIELDS = ("doc", "where", "quote")


def _bad(where: str, message: str) -> UsageError:
    return UsageError(f"{where}: {message}")


def _number(where: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(where, f"{name} must be a number, got {value!r}")
    return float(value)


def _fields(where: str, name: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(where, f"{name} must be a mapping of key fields, got {value!r}")
    for field in value:
        if field not in KEY_FIELDS:
            hint = closest(str(field), KEY_FIELDS)
            raise _bad(where, f"{name}: unknown key field {field!r}"
                       + (f"; did you mean {hint!r}?" if hint else "") + f" valid: {', '.join(KEY_FIELDS)}")
    return dict(value)


def reference_from_data(entry: Any, where: str) -> Reference:
    if not isinstance(entry, dict):
        raise _bad(where, f"a reference is a mapping with {', '.join(ENTRY_FIELDS)}")
    for name in entry:
        if name not in ENTRY_FIELDS:
            hint = closest(str(name), ENTRY_FIELDS)
            raise _bad(where, f"unknown field {name!r}" + (f"; did you mean {hint!r}?" if hint else "")
                       + f" valid: {', '.join(ENTRY_FIELDS)}")
    for name in ("value", "unit", "source"):  # an empty unit means "the runs' own unit"
        if name not in entry:
            raise _bad(where, f"missing {name!r}")
    source = entry["source"]
    if not isinstance(source, dict) or not source.get("doc"):
        raise _bad(where, "source must be a mapping with doc (and where, quote)")
    unknown = [name for name in source if name not in SOURCE_FIELDS]
    if unknown:
        raise _bad(where, f"source: unknown field {unknown[0]!r}; valid: {', '.join(SOURCE_FIELDS)}")
    tolerance = _number(where, "tolerance_pct", entry.get("tolerance_pct", 5))
    if not 0 <= tolerance < 100:
        raise _bad(where, f"tolerance_pct must lie in [0, 100), got {tolerance:g}")
    value = _number(where, "value", entry["value"])
    if value <= 0:
        raise _bad(where, f"value must be > 0, got {value:g}")
    return Reference(value=value, unit=str(entry["unit"]), tolerance=tolerance / 100.0,
                     source=Source(str(source["doc"]), str(source.get("where", "")), str(source.get("quote", ""))),
                     match=_fields(where, "match", entry.get("match")),
                     conditions=_fields(where, "conditions", entry.get("conditions")),
                     label=str(entry.get("label", "")))


def references_from_data(data: Any, origin: str) -> list[Reference]:
    """A list of entries (or one entry) read from `origin` (a file name, for messages)."""
    entries = data if isinstance(data, list) else [data]
    if not entries:
        raise UsageError(f"{origin}: no references in it")
    return [reference_from_data(entry, f"{origin}: reference {index + 1}") for index, entry in enumerate(entries)]
