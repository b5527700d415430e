"""What a stored run's fields may hold, checked once for every run whatever its origin (a run here, an
imported log, a bundle from another site, a measurement): `Store.add_runs` checks every record, and the
bundle reader checks each line of runs.jsonl the same way as it streams past (so that its error names the
line).

Times are the store's one spelling, `YYYY-MM-DDTHH:MM:SSZ` (UTC): runs sort by them and `--since` compares
them as text, so `"not-a-date"` would sort after every real time and match every `--since`. A time must be a
real one, from 1970 to a day ahead of this machine's clock (so that none sorts as newest for years); a
run's end not before its start. Counts are positive integers; names are text of a bounded length; a result's value is a finite
number, and the figure an `ok` run is judged by (its primary metric) is above zero: a zero or `-0`
throughput measured nothing, so the run failed.
"""
from __future__ import annotations

import calendar
import math
import re
import time
from typing import Any

from dlrun.errors import DlrunError
from dlrun.results.store.schema import ORIGINS, PRIMARY_METRICS

#: The spelling of every stored time.
STAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
#: How far ahead of this machine's clock a time may be (another site's clock may run ahead a little).
AHEAD_S = 86400
#: Every state a run may be stored in (dlrun.execute.record.STATUSES).
STORED_STATUSES = ("ok", "failed", "cancelled", "timeout", "lost")
TIME_FIELDS = ("created_at", "finished_at")
COUNT_FIELDS = ("nodes", "ranks_per_node", "world_size", "batch_size")
TEXT_FIELDS = ("workload", "model", "image", "image_digest", "system", "scheduler", "launcher", "runtime", "fabric",
               "precision", "site", "experiment", "point", "key_hash", "verdict")
MAX_TEXT = 1000
MAX_PATH = 4096
MAX_COUNT = 2**31


class StoredFieldError(DlrunError):
    """A run whose fields the store cannot hold as they are: one line naming the run, the field and what is
    valid (exit 2)."""

    exit_code = 2


def stamp_seconds(value: str) -> int:
    """A stored time as seconds since 1970 (ValueError when it is not one)."""
    if not isinstance(value, str) or not _STAMP.fullmatch(value):
        raise ValueError("not in the form YYYY-MM-DDTHH:MM:SSZ")
    return calendar.timegm(time.strptime(value, STAMP_FORMAT))  # a month 13 or a 25th hour is a ValueError


def check_stamp(name: str, value: Any, now: float | None = None) -> str:
    """`value` as a stored time, or ValueError saying what is wrong and what is valid."""
    try:
        seconds = stamp_seconds(value)
    except ValueError as exc:
        raise ValueError(f"{name} {_show(value)} is not a UTC time ({exc}); valid: e.g. 2026-11-23T11:44:54Z") \
            from None
    now = time.time() if now is None else now
    if not 0 <= seconds <= now + AHEAD_S:
        raise ValueError(f"{name} {value} is before 1970 or more than a day ahead of this machine's clock "
                         f"({time.strftime(STAMP_FORMAT, time.gmtime(now))}); valid: the time the run ran")
    return value


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_text(name: str, value: Any, limit: int = MAX_TEXT) -> None:
    if value is not None and (not isinstance(value, str) or len(value) > limit or "\x00" in value):
        raise ValueError(f"{name} {_show(value)} is not a text of at most {limit} characters")


def _check_count(name: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT):
        raise ValueError(f"{name} {_show(value)} is not a count (an integer from 1 to {MAX_COUNT})")


def check_results(status: Any, results: list[Any]) -> None:
    """Each result row: a metric name, a finite value and a unit; an `ok` run's primary figure above zero."""
    for row in results:
        if not isinstance(row, dict):
            raise ValueError(f"a result row {_show(row)} is not a mapping")
        metric, value = row.get("metric"), row.get("value")
        _check_text("a result's metric", metric, 200)
        _check_text(f"result {metric}'s unit", row.get("unit"), 200)
        if not metric or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"result {_show(metric)}: value {_show(value)} is not a finite number")
        if status == "ok" and metric in PRIMARY_METRICS and not value > 0:
            raise ValueError(f"result {metric}: value {_show(value)} of an ok run measured nothing (zero or "
                             "-0); valid: a figure above zero, or the run stored failed")


def check_fields(record: dict[str, Any], results: list[Any], now: float | None = None) -> None:
    """Refuse (ValueError, one line) a run record that the store must not hold as it is (module notes)."""
    created = check_stamp("created_at", record.get("created_at"), now)
    if record.get("finished_at") is not None:
        finished = check_stamp("finished_at", record["finished_at"], now)
        if finished < created:
            raise ValueError(f"finished_at {finished} is before created_at {created}")
    if record.get("status") not in STORED_STATUSES:
        raise ValueError(f"status {_show(record.get('status'))} is not one of {', '.join(STORED_STATUSES)}")
    if record.get("origin") is not None and record["origin"] not in ORIGINS:
        raise ValueError(f"origin {_show(record['origin'])} is not one of {', '.join(ORIGINS)}")
    for name in COUNT_FIELDS:
        _check_count(name, record.get(name))
    for name in TEXT_FIELDS:
        _check_text(name, record.get(name))
    _check_text("run_dir", record.get("run_dir"), MAX_PATH)
    check_results(record.get("status"), results)


def checked_fields(record: dict[str, Any], results: list[Any]) -> None:
    """`check_fields` for the store: its refusal as StoredFieldError naming the run."""
    try:
        check_fields(record, results)
    except ValueError as exc:
        raise StoredFieldError(f"run {_show(record.get('id'))}: {exc}; not stored") from None
