"""The selected successful runs' values read run by run and grouped by key (and site): what compare reads
where the store's aggregates cannot answer (dlrun.results.store.samples), and what the gate reads (it orders
each key's runs by time)."""
from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import Iterable
from typing import Any

from dlrun.results.store.query import Filters, where
from dlrun.results.store.schema import COMPARED_VALUES


def by_key(conn: sqlite3.Connection, filters: Filters, by_site: bool, compared: str) -> list[dict[str, Any]]:
    clause, params = where(filters)
    # The unary + keeps SQLite from walking the status or key index over the whole table (a random
    # read per run, 3x slower than one pass over 100,000 runs); the filters' own indexes still apply.
    clause = (clause + " AND " if clause else "WHERE ") + "+r.status = 'ok'"
    site = "r.site" if by_site else "CAST(NULL AS TEXT)"  # PostgreSQL orders by no bare NULL
    value, read_from = COMPARED_VALUES[compared]
    metrics = ", ".join(f"'{m}'" for m in read_from)
    # one row per run: group_concat would turn each value into SQLite's text of it, not always the same double
    query = (f"SELECT r.key_hash, r.key, {site}, res.metric, res.unit, r.id, {value}, "
             "coalesce(r.verdict, 'unknown'), r.image "
             f"FROM runs r JOIN results res ON res.run_id = r.id AND res.metric IN ({metrics}) "
             f"{clause} ORDER BY +r.key_hash, {site}, res.metric, res.unit")
    out = []
    for (kh, key, st, metric, unit), found in itertools.groupby(conn.execute(query, params), key=lambda r: r[:5]):
        members = list(found)
        out.append({"key_hash": kh, "key": json.loads(key) if key else None, "site": st, "metric": metric,
                    "unit": unit, "n": len(members), "run_ids": [m[5] for m in members],
                    "values": [float(m[6]) for m in members], "verdicts": [m[7] for m in members],
                    "images": sorted({m[8] for m in members if m[8] is not None})})
    return out


def reasons(conn: sqlite3.Connection, run_ids: Iterable[str], verdict: str, chunk: int) -> dict[str, list[str]]:
    """run id -> its stored quality reasons of `verdict`, for those of `run_ids` that have one (read `chunk`
    ids per query)."""
    ids = list(dict.fromkeys(run_ids))
    found: dict[str, list[str]] = {}
    for start in range(0, len(ids), chunk):
        part = ids[start:start + chunk]
        for run_id, quality in conn.execute(
                f"SELECT id, quality FROM runs WHERE id IN ({', '.join('?' * len(part))}) AND quality LIKE ?",
                [*part, f'%"{verdict}: %']):
            said = [r for r in json.loads(quality).get("reasons") or [] if r.startswith(f"{verdict}: ")]
            found.update({run_id: said} if said else {})
    return found
