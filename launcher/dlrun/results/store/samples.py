"""The store's aggregates: per group of successful runs that share every column compare and report select and
group by (key, site, metric, unit, verdict, image and the filter columns), the exact moments of their primary
values (dlrun.results.moments), their extremes and newest run, kept as runs are added, imported and deleted.

`samples` holds a row per group; `sample_runs` a row per run and primary metric, naming its group, with its
value and time, indexed so that a group's median, its newest runs and its values in order are index reads.
Runs whose value is no rate (zero, negative, not finite) are kept in groups of their own (`rate` 0: no sums)
so that compare can still name them. The raw runs stay the source of truth: `rebuild` makes both tables again
from them (the schema's upgrade does, and anything that writes runs around the store must)."""
from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterable, Iterator
from typing import Any

from dlrun.results.moments import Moments, is_rate, scaled

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS samples (
        id INTEGER PRIMARY KEY,
        key_hash TEXT, key TEXT, site TEXT, metric TEXT NOT NULL, unit TEXT NOT NULL, verdict TEXT NOT NULL,
        image TEXT, image_digest TEXT, workload TEXT, system TEXT, precision TEXT, batch_size INTEGER,
        nodes INTEGER, experiment TEXT, rate INTEGER NOT NULL,
        n INTEGER NOT NULL, sum_log TEXT NOT NULL, sum_log2 TEXT NOT NULL, sum TEXT NOT NULL, sum2 TEXT NOT NULL,
        min REAL, max REAL, newest TEXT)""",
    "CREATE INDEX IF NOT EXISTS samples_key ON samples(key_hash, site, metric, unit)",
    "CREATE INDEX IF NOT EXISTS samples_workload ON samples(workload)",
    "CREATE INDEX IF NOT EXISTS samples_system ON samples(system)",
    """CREATE TABLE IF NOT EXISTS sample_runs (
        run_id TEXT NOT NULL, metric TEXT NOT NULL, sample INTEGER NOT NULL, value REAL NOT NULL,
        created_at TEXT NOT NULL, PRIMARY KEY (run_id, metric)) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS sample_runs_value ON sample_runs(sample, value)",
    "CREATE INDEX IF NOT EXISTS sample_runs_newest ON sample_runs(sample, created_at, run_id)",
    # every filter column after the workload and time: a count of the runs a selection of a workload holds (a
    # report's first figure) reads this index alone, not a row per run (200,000 random reads for `--workload W
    # --image I` in a million-run store), and a list of its newest runs still walks it in time order
    "CREATE INDEX IF NOT EXISTS runs_filters ON runs(workload, created_at, system, image, status, site, "
    "image_digest, experiment, precision, batch_size, nodes)",
)
#: The run columns a group shares, in `samples`' order (after the metric and unit of the result).
RUN_FIELDS = ("key_hash", "key", "site", "verdict", "image", "image_digest", "workload", "system", "precision",
              "batch_size", "nodes", "experiment")
IDENTITY = ("key_hash", "key", "site", "metric", "unit", "verdict", "image", "image_digest", "workload", "system",
            "precision", "batch_size", "nodes", "experiment", "rate")
_EMPTY = Moments().sums_text()


def identity(run: dict[str, Any], metric: str, unit: str, value: float) -> tuple:
    """The group of a run's primary result."""
    fields = {**{name: run.get(name) for name in RUN_FIELDS}, "metric": metric, "unit": unit,
              "rate": 1 if is_rate(value) else 0}
    fields["verdict"] = fields["verdict"] or "unknown"
    return tuple(fields[name] for name in IDENTITY)


def group_clause(ident: tuple) -> str:
    """The `WHERE` clause of the group `ident` (as `identity` gives it): `IS ?` matches a NULL field, and the key
    hash, which a stored run always has, is matched by `=`, which both backends look up in `samples_key`
    (PostgreSQL's `IS NOT DISTINCT FROM` is no index condition)."""
    return " AND ".join(f"{name} {'=' if name == 'key_hash' and value is not None else 'IS'} ?"
                        for name, value in zip(IDENTITY, ident))


class Pending:
    """The groups a write transaction changes: their new runs are recorded at once, their sums once, at the end."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        self.ids: dict[tuple, int] = {}
        self.added: dict[int, list] = {}  # group -> [n, the four sums, min, max, newest] of the runs added
        self.runs: list[tuple] = []  # sample_runs rows not yet written

    def _group(self, ident: tuple) -> int:
        if ident in self.ids:
            return self.ids[ident]
        row = self.conn.execute(f"SELECT id FROM samples WHERE {group_clause(ident)}", ident).fetchone()
        if row is None:
            row = self.conn.execute(
                f"INSERT INTO samples ({', '.join(IDENTITY)}, n, sum_log, sum_log2, sum, sum2) "
                f"VALUES ({', '.join('?' * len(IDENTITY))}, 0, ?, ?, ?, ?) RETURNING id", (*ident, *_EMPTY)).fetchone()
        self.ids[ident] = row[0]
        return row[0]

    def add(self, run: dict[str, Any], metric: str, unit: str, value: float) -> None:
        """One successful run's primary result (the caller inserted the run)."""
        group = self._group(identity(run, metric, unit, value))
        self.runs.append((run["id"], metric, group, value, run["created_at"]))
        if len(self.runs) >= 10_000:
            self._write_runs()
        sums = self.added.get(group)
        if sums is None:
            sums = self.added[group] = [0, 0, 0, 0, 0, math.inf, -math.inf, ""]
        sums[0] += 1
        if is_rate(value):
            value = float(value)
            (a, b), (c, d) = scaled(math.log(value)), scaled(value)
            sums[1] += a
            sums[2] += b
            sums[3] += c
            sums[4] += d
            sums[5], sums[6] = min(sums[5], value), max(sums[6], value)
        sums[7] = max(sums[7], run["created_at"])

    def _write_runs(self) -> None:
        self.conn.executemany("INSERT INTO sample_runs (run_id, metric, sample, value, created_at) "
                              "VALUES (?, ?, ?, ?, ?)", self.runs)
        self.runs.clear()

    def flush(self) -> None:
        self._write_runs()
        for group, (n, s1, s2, t1, t2, low, high, newest) in self.added.items():
            *before, was_low, was_high, was_newest = self.conn.execute(
                "SELECT n, sum_log, sum_log2, sum, sum2, min, max, newest FROM samples WHERE id = ?",
                (group,)).fetchone()
            total = Moments.from_text(*before, None, None) + Moments(n, s1, s2, t1, t2)
            # extremes: a group of runs whose value is no rate has none (both stay NULL)
            low = _merged(min, was_low, low)
            high = _merged(max, was_high, high)
            self.conn.execute("UPDATE samples SET n = ?, sum_log = ?, sum_log2 = ?, sum = ?, sum2 = ?, "
                              "min = ?, max = ?, newest = ? WHERE id = ?",
                              (total.n, *total.sums_text(), low, high, max(was_newest or newest, newest), group))
        self.added.clear()


def _merged(pick, stored: float | None, added: float) -> float | None:
    """The group's extreme after the runs added: `pick` (min or max) of the stored one and theirs."""
    if not math.isfinite(added):
        return None
    return added if stored is None else pick(stored, added)


def remove(conn: sqlite3.Connection, run_ids: list[str]) -> None:
    """Take these runs out of their groups (before their rows are deleted): exact, as the sums are."""
    marks = ", ".join("?" * len(run_ids))
    taken: dict[int, Moments] = {}
    for group, value in conn.execute(f"SELECT sample, value FROM sample_runs WHERE run_id IN ({marks})", run_ids):
        moments = Moments.of([value]) if is_rate(value) else Moments(1)
        taken[group] = taken.get(group, Moments()) + moments
    conn.execute(f"DELETE FROM sample_runs WHERE run_id IN ({marks})", run_ids)
    for group, moments in taken.items():
        n, *sums = conn.execute("SELECT n, sum_log, sum_log2, sum, sum2 FROM samples WHERE id = ?",
                                (group,)).fetchone()
        left = Moments.from_text(n, *sums, None, None)
        left = Moments(left.n - moments.n, left.s1 - moments.s1, left.s2 - moments.s2, left.t1 - moments.t1,
                       left.t2 - moments.t2)
        if left.n <= 0:
            conn.execute("DELETE FROM samples WHERE id = ?", (group,))
            continue
        conn.execute("UPDATE samples SET n = ?, sum_log = ?, sum_log2 = ?, sum = ?, sum2 = ?, "
                     "min = (SELECT min(value) FROM sample_runs WHERE sample = ?), "
                     "max = (SELECT max(value) FROM sample_runs WHERE sample = ?), "
                     "newest = (SELECT max(created_at) FROM sample_runs WHERE sample = ?) WHERE id = ?",
                     (left.n, *left.sums_text(), group, group, group, group))


def rebuild(conn: sqlite3.Connection, primary_metrics: Iterable[str], chunk: int = 20_000) -> None:
    """Both tables made again from the stored runs, streamed (memory bounded by the number of groups)."""
    conn.execute("DELETE FROM sample_runs")
    conn.execute("DELETE FROM samples")
    pending = Pending(conn)
    metrics = ", ".join(f"'{m}'" for m in primary_metrics)
    cols = ("id", "created_at", *RUN_FIELDS)
    query = (f"SELECT {', '.join('r.' + c for c in cols)}, res.metric, res.unit, res.value "
             f"FROM runs r JOIN results res ON res.run_id = r.id AND res.metric IN ({metrics}) WHERE r.status = 'ok'")
    # the reading cursor stays open while the groups are written through the connection; on a server it is the
    # server's (PgConnection.stream), as a plain cursor there holds every row in this process
    stream = getattr(conn, "stream", None)
    for row in stream(query, chunk) if stream is not None else _fetched(conn.execute(query), chunk):
        pending.add(dict(zip(cols, row)), row[-3], row[-2], row[-1])
    pending.flush()


def _fetched(cursor: sqlite3.Cursor, chunk: int) -> Iterator[tuple]:
    while rows := cursor.fetchmany(chunk):
        yield from rows


#: How many run ids of a group compare and report list (its newest); a group with more says how many it has.
LISTED = 100
_READ = ("id", "key_hash", "key", "site", "metric", "unit", "verdict", "image", "rate", "n", "sum_log", "sum_log2",
         "sum", "sum2", "min", "max")


def grouped(conn: sqlite3.Connection, clause: str, params: list, by_site: bool) -> list[dict[str, Any]]:
    """The groups `clause` (on alias `s`) selects, merged per key (and site), metric and unit, in the order the
    row-by-row query gives them: moments, verdict counts, image names, the newest LISTED run ids, the runs
    whose value is no rate, and the median."""
    rows = conn.execute(f"SELECT {', '.join('s.' + c for c in _READ)} FROM samples s {clause}", params).fetchall()
    merged: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        r = dict(zip(_READ, row))
        site = r["site"] if by_site else None
        out = merged.setdefault((r["key_hash"] or "", site or "", r["metric"], r["unit"]), {
            "key_hash": r["key_hash"], "key": r["key"], "site": site, "metric": r["metric"], "unit": r["unit"],
            "moments": Moments(), "parts": [], "dropped_parts": [], "counts": {}, "images": set()})
        if r["image"] is not None:
            out["images"].add(r["image"])
        if not r["rate"]:
            out["dropped_parts"].append(r["id"])
            continue
        out["moments"] += Moments.from_text(r["n"], r["sum_log"], r["sum_log2"], r["sum"], r["sum2"], r["min"], r["max"])
        out["parts"].append(r["id"])
        out["counts"][r["verdict"]] = out["counts"].get(r["verdict"], 0) + r["n"]
    groups = [merged[k] for k in sorted(merged)]
    for group in groups:
        group["images"] = sorted(group["images"])
        group["dropped"] = sorted(run_ids(conn, group["dropped_parts"]))
        group["run_ids"] = newest(conn, group["parts"], LISTED)
        group["median"] = median(conn, group["parts"], group["moments"].n) if group["parts"] else None
    return groups


def _in(parts: list[int]) -> str:
    return ", ".join(str(int(p)) for p in parts)


def run_ids(conn: sqlite3.Connection, parts: list[int]) -> list[str]:
    if not parts:
        return []
    return [r[0] for r in conn.execute(f"SELECT run_id FROM sample_runs WHERE sample IN ({_in(parts)})")]


def newest(conn: sqlite3.Connection, parts: list[int], limit: int) -> list[str]:
    """The ids of the newest `limit` runs of these groups (newest first)."""
    found: list[tuple[str, str]] = []
    for part in parts:  # one index read each (sample_runs_newest)
        found += conn.execute("SELECT created_at, run_id FROM sample_runs WHERE sample = ? "
                              "ORDER BY created_at DESC, run_id DESC LIMIT ?", (part, limit)).fetchall()
    return [run_id for _, run_id in sorted(found, reverse=True)[:limit]]


def median(conn: sqlite3.Connection, parts: list[int], n: int) -> float:
    """The median of these groups' n values, as dlrun.results.compare.stats.median computes it from a list."""
    offset, count = (n // 2, 1) if n % 2 else (n // 2 - 1, 2)
    order = "+value" if len(parts) > 1 else "value"  # one group: walk its (sample, value) index
    values = [r[0] for r in conn.execute(f"SELECT value FROM sample_runs WHERE sample IN ({_in(parts)}) "
                                         f"ORDER BY {order} LIMIT ? OFFSET ?", (count, offset))]
    return values[0] if count == 1 else 0.5 * (values[0] + values[1])


def values(conn: sqlite3.Connection, parts: list[int], limit: int) -> list[float]:
    """Up to `limit` values of these groups: those of their newest runs."""
    out: list[tuple[str, float]] = []
    for part in parts:
        out += conn.execute("SELECT created_at, value FROM sample_runs WHERE sample = ? "
                            "ORDER BY created_at DESC, run_id DESC LIMIT ?", (part, limit)).fetchall()
    return [value for _, value in sorted(out, reverse=True)[:limit]]
