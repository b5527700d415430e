"""Which stored runs a command means: filters as data, turned into one SQL `WHERE` clause.

Each filter takes several values (any of them matches); different filters must all match. `--image`
matches the image's name, or its digest when the value starts with `sha256:` (a prefix is enough).
`--since` takes a date (`2026-11-01`), a UTC time (`2026-11-01T12:00`) or an age (`90m`, `12h`, `7d`, `2w`).
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields

from dlrun.errors import UsageError, closest
from dlrun.results.store.fields import STORED_STATUSES
from dlrun.runoptions import PRECISIONS

#: States a stored run can be in (as the store checks them: dlrun.results.store.fields).
STATUSES = STORED_STATUSES
#: Filter name -> the runs column it matches.
COLUMNS = {"workload": "workload", "system": "system", "image": "image", "status": "status", "site": "site",
           "experiment": "experiment", "precision": "precision", "batch_size": "batch_size", "nodes": "nodes"}
#: Filters of counts: any positive number is a valid question (none stored is an empty answer, not a typo).
COUNTS = ("batch_size", "nodes")
_AGE = re.compile(r"^(\d+)([mhdw])$")
_AGE_SECONDS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DATE_FORMATS = ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%d %H:%M")


@dataclass(frozen=True)
class Filters:
    run_ids: tuple[str, ...] = ()      # exact ids (resolve prefixes with Store.resolve_ids first)
    workload: tuple[str, ...] = ()
    system: tuple[str, ...] = ()
    image: tuple[str, ...] = ()
    status: tuple[str, ...] = ()
    site: tuple[str, ...] = ()
    experiment: tuple[str, ...] = ()
    precision: tuple[str, ...] = ()
    batch_size: tuple[int, ...] = ()   # per rank, as `dlrun run --batch-size`
    nodes: tuple[int, ...] = ()
    since: str | None = None           # UTC, as stored: YYYY-MM-DDTHH:MM:SSZ

    def active(self) -> dict[str, tuple]:
        """The value filters that are set (not run ids, not since)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name in COLUMNS and getattr(self, f.name)}


def where(filters: Filters, alias: str = "r") -> tuple[str, list]:
    """(`WHERE ...` or "", parameters) selecting the runs `filters` describe."""
    clauses: list[str] = []
    params: list = []
    if filters.run_ids:
        clauses.append(f"{alias}.id IN ({', '.join('?' * len(filters.run_ids))})")
        params += filters.run_ids
    for name, values in filters.active().items():
        if name == "image":
            parts = []
            for value in values:
                if value.startswith("sha256:"):
                    parts.append(f"{alias}.image_digest LIKE ? ESCAPE '\\'")
                    params.append(like_prefix(value))
                else:
                    parts.append(f"{alias}.image = ?")
                    params.append(value)
            clauses.append("(" + " OR ".join(parts) + ")")
        else:
            clauses.append(f"{alias}.{COLUMNS[name]} IN ({', '.join('?' * len(values))})")
            params += values
    if filters.since:
        clauses.append(f"{alias}.created_at >= ?")
        params.append(filters.since)
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", params


def like_prefix(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def parse_since(text: str, now: float | None = None) -> str:
    """`--since` value -> the UTC timestamp runs must be created at or after."""
    value = text.strip()
    match = _AGE.match(value)
    if match:
        now = time.time() if now is None else now
        stamp = now - int(match.group(1)) * _AGE_SECONDS[match.group(2)]
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))
    for fmt in _DATE_FORMATS:
        try:
            parsed = time.strptime(value, fmt)
        except ValueError:
            continue
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", parsed)
    raise UsageError(f"bad --since {text!r}; valid: a date (2026-11-01), a UTC time (2026-11-01T12:00) "
                     "or an age (90m, 12h, 7d, 2w)")


def check_values(filters: Filters, stored: Callable[[str], Iterable[str]],
                 known: Callable[[str], Iterable[str]] | None = None,
                 has: Callable[[str, str], bool] | None = None) -> None:
    """Refuse a filter value no stored run has, naming the closest one: a typo must not read as
    "no results". `has(column, value)` tells whether a stored run has that value (one indexed look); only for
    a value it lacks are `stored(column)` (every value the store holds in that column, a scan of the column on
    a server) and `known(filter)` (the names the catalogs define for it) asked: a value the catalogs define is
    valid, and selects nothing until a run of it is stored."""
    for name, values in filters.active().items():
        if name in COUNTS:
            _positive(name, values)
            continue
        for value in values:
            if name == "image" and value.startswith("sha256:"):
                continue  # a digest prefix; checked by what it selects
            # the states a run can be in, and what `dlrun run --precision` takes: valid, stored or not
            if value in (STATUSES if name == "status" else PRECISIONS if name == "precision" else ()):
                continue
            if name != "status" and has is not None and has(COLUMNS[name], value):
                continue
            valid = list(STATUSES) if name == "status" else sorted(
                {*(v for v in stored(COLUMNS[name]) if v is not None), *(PRECISIONS if name == "precision" else ())})
            if value in valid:
                continue
            defined = sorted(known(name)) if known is not None and name != "status" else []
            if value not in defined:
                raise _unknown(name, value, valid, defined)


def _positive(name: str, values: Iterable[int]) -> None:
    for value in values:
        if value < 1:
            raise UsageError(f"bad --{name.replace('_', '-')} {value}; valid: a whole number of at least 1")


def _unknown(name: str, value: str, valid: list[str], defined: Iterable[str] = ()) -> UsageError:
    option = f"--{name}"
    defined = sorted(defined)
    hint = closest(value, sorted({*valid, *defined}))
    if not valid:
        catalog = ", and no catalog defines it" if defined else ""
        did_you_mean = f"; did you mean {hint!r}?" if hint else ""
        return UsageError(f"bad {option} {value!r}: no stored run has any {name}{catalog}{did_you_mean}")
    shown = ", ".join(valid[:20]) + (f", ... ({len(valid)} in all)" if len(valid) > 20 else "")
    did_you_mean = f"; did you mean {hint!r}?" if hint else ";"
    return UsageError(f"bad {option} {value!r}: no stored run has it{did_you_mean} stored: {shown}")
