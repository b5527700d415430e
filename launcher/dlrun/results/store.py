"""SQLite result store: WAL mode, one transaction per run, safe for parallel writers.

Schema versions live in `PRAGMA user_version`. Version 1 is the first schema (`SCHEMA_V1`, kept as it was
shipped); every later version is a list of statements in `MIGRATIONS`, plus a Python step that fills new
columns of existing rows. A fresh store is created at version 1 and migrated like any other, so a new and an
upgraded store hold exactly the same schema. Version 2 adds where a run came from (`site`, `origin`), what
experiment point it belongs to (`experiment`, `point`) and its comparability key (`key`, `key_hash`; see
`dlrun.results.key`), with the indexes that the `results list` filters and `compare` grouping use.
"""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dlrun.errors import DlrunError, UsageError, unknown_name
from dlrun.results.key import key_from_run, key_hash, key_json
from dlrun.results.query import Filters, like_prefix, where
from dlrun.results.site import local_site

SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    workload TEXT, model TEXT, image TEXT, image_digest TEXT, system TEXT,
    scheduler TEXT, launcher TEXT, runtime TEXT, fabric TEXT,
    nodes INTEGER, ranks_per_node INTEGER, world_size INTEGER, batch_size INTEGER, precision TEXT,
    run_dir TEXT,
    plan TEXT NOT NULL,
    provenance TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_created ON runs(created_at);
CREATE TABLE IF NOT EXISTS results (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    metric TEXT NOT NULL,
    value REAL NOT NULL,
    unit TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, metric)
);
"""

#: version -> statements that take a store from the version before to this one.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    2: (
        "ALTER TABLE runs ADD COLUMN site TEXT",          # the site that ran (or imported) it
        "ALTER TABLE runs ADD COLUMN origin TEXT",        # local | import-log | bundle
        "ALTER TABLE runs ADD COLUMN experiment TEXT",    # experiment and point it reproduces, if any
        "ALTER TABLE runs ADD COLUMN point TEXT",
        "ALTER TABLE runs ADD COLUMN key TEXT",           # comparability key (canonical JSON)
        "ALTER TABLE runs ADD COLUMN key_hash TEXT",
        # list filters, newest first within each
        "CREATE INDEX IF NOT EXISTS runs_workload ON runs(workload, created_at)",
        "CREATE INDEX IF NOT EXISTS runs_system ON runs(system, created_at)",
        "CREATE INDEX IF NOT EXISTS runs_image ON runs(image, created_at)",
        "CREATE INDEX IF NOT EXISTS runs_status ON runs(status, created_at)",
        "CREATE INDEX IF NOT EXISTS runs_site ON runs(site, created_at)",
        "CREATE INDEX IF NOT EXISTS runs_experiment ON runs(experiment, point)",
        # compare: group by key
        "CREATE INDEX IF NOT EXISTS runs_key ON runs(key_hash, status)",
    ),
}
SCHEMA_VERSION = max(MIGRATIONS)

RUN_COLUMNS = ("id", "created_at", "finished_at", "status", "workload", "model", "image", "image_digest",
               "system", "scheduler", "launcher", "runtime", "fabric", "nodes", "ranks_per_node",
               "world_size", "batch_size", "precision", "run_dir", "site", "origin", "experiment", "point",
               "key_hash")
#: Origins a run may have: launched here, imported from another tool's log, or read from a results bundle.
ORIGINS = ("local", "import-log", "bundle")
#: The metrics a run is judged by (one per run): training throughput, or collective bus bandwidth.
PRIMARY_METRICS = ("throughput", "busbw")


def ensure_schema(conn: sqlite3.Connection) -> None:
    """Create the schema, or upgrade an older store in place, in one write transaction.

    Cheap when the store is current (one pragma read). Concurrent first users serialise on the write
    lock, and the one that comes second finds the work done."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version == SCHEMA_VERSION:
        return
    if version > SCHEMA_VERSION:
        raise DlrunError(f"the result store has schema version {version}; this dlrun reads up to "
                         f"{SCHEMA_VERSION}: upgrade dlrun")
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version < SCHEMA_VERSION:
            if version == 0:
                for statement in SCHEMA_V1.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                version = 1
            for target in range(version + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[target]:
                    conn.execute(statement)
                _FILL[target](conn)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _fill_v2(conn: sqlite3.Connection) -> None:
    """Existing runs were stored at this site; they get their origin back from the record and their key."""
    site = local_site()
    cols = ("id", "workload", "model", "image", "image_digest", "system", "fabric", "nodes", "world_size",
            "batch_size", "precision")
    rows = conn.execute(f"SELECT {', '.join(cols)}, plan, provenance FROM runs WHERE key_hash IS NULL").fetchall()
    for row in rows:
        run = dict(zip(cols, row[:len(cols)]))
        run["plan"], run["provenance"] = json.loads(row[-2]), json.loads(row[-1])
        results = [json.loads(r[0]) for r in conn.execute(
            "SELECT data FROM results WHERE run_id = ? ORDER BY metric", (run["id"],))]
        origin = run["plan"].get("origin") or run["provenance"].get("origin") or "local"
        run["origin"] = origin
        key = key_from_run(run, results)
        conn.execute("UPDATE runs SET site = ?, origin = ?, key = ?, key_hash = ? WHERE id = ?",
                     (site, origin, key_json(key), key_hash(key), run["id"]))


_FILL = {2: _fill_v2}


class Store:
    def __init__(self, path: Path):
        self.path = Path(path)

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        try:
            conn.execute("PRAGMA busy_timeout = 60000")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA foreign_keys = ON")
            ensure_schema(conn)
            yield conn
        finally:
            conn.close()

    def add_run(self, run: dict[str, Any], results: list[dict[str, Any]]) -> None:
        """Insert a run and its result rows atomically (BEGIN IMMEDIATE takes the write lock up front).

        The comparability key is computed here from the record and its rows, so every writer (runs,
        imported logs, bundles, matmul measurements) stores one; a run that names no site was made here."""
        self.add_runs([(run, results)])

    def add_runs(self, runs: list[tuple[dict[str, Any], list[dict[str, Any]]]], *, skip_existing: bool = False,
                 same_provenance: tuple[str, ...] = ()) -> list[str]:
        """Insert (run, rows) pairs in one transaction: all of them or none; returns the ids inserted.

        With `skip_existing`, a run whose id is stored already is left out; with `same_provenance`, so is a
        run for which a stored run has equal values of all these provenance fields (a log imported twice).
        Both are decided inside the transaction, so parallel importers of the same data add it once."""
        prepared = [self._row(run, results) for run, results in runs]
        added: list[str] = []
        with self.connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for row, results in prepared:
                    if skip_existing and conn.execute("SELECT 1 FROM runs WHERE id = ?", (row["id"],)).fetchone():
                        continue
                    if same_provenance and self._provenance_stored(conn, row["provenance"], same_provenance):
                        continue
                    cols = list(row)
                    conn.execute(f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                                 [row[c] for c in cols])
                    conn.executemany(
                        "INSERT INTO results (run_id, metric, value, unit, data) VALUES (?, ?, ?, ?, ?)",
                        [(row["id"], r["metric"], r["value"], r["unit"], json.dumps(r, sort_keys=True))
                         for r in results])
                    added.append(row["id"])
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return added

    @staticmethod
    def _row(run: dict[str, Any], results: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        row = {col: run.get(col) for col in RUN_COLUMNS}
        row["site"] = run.get("site") or local_site()
        row["origin"] = run.get("origin") or "local"
        if row["origin"] not in ORIGINS:
            raise ValueError(f"origin {row['origin']!r} is not one of {', '.join(ORIGINS)}")
        key = run.get("key") or key_from_run({**run, "origin": row["origin"]}, results)
        row["key"], row["key_hash"] = key_json(key), key_hash(key)
        row["plan"] = json.dumps(run["plan"], sort_keys=True)
        row["provenance"] = json.dumps(run.get("provenance", {}), sort_keys=True)
        return row, results

    @staticmethod
    def _provenance_stored(conn: sqlite3.Connection, provenance_json: str, fields: tuple[str, ...]) -> bool:
        provenance = json.loads(provenance_json)
        values = [provenance.get(name) for name in fields]
        if None in values:  # a run that lacks one of the facts is like no stored run
            return False
        if not all(name.isidentifier() for name in fields):
            raise ValueError(f"not provenance field names: {fields}")
        clauses = " AND ".join(f"json_extract(provenance, '$.{name}') = ?" for name in fields)
        return conn.execute(f"SELECT 1 FROM runs WHERE {clauses} LIMIT 1", values).fetchone() is not None

    def list_runs(self, limit: int | None = 50, filters: Filters | None = None) -> list[dict[str, Any]]:
        clause, params = where(filters or Filters())
        metrics = ", ".join(f"'{m}'" for m in PRIMARY_METRICS)
        query = (f"SELECT r.{', r.'.join(RUN_COLUMNS)}, res.value, res.unit FROM runs r "
                 f"LEFT JOIN results res ON res.run_id = r.id AND res.metric IN ({metrics}) "
                 f"{clause} ORDER BY r.created_at DESC, r.id DESC")
        if limit is not None:
            query += " LIMIT ?"
            params.append(limit)
        with self.connect() as conn:
            rows = conn.execute(query, params).fetchall()
        return [dict(zip((*RUN_COLUMNS, "value", "unit"), row)) for row in rows]

    def distinct(self, column: str) -> list[str]:
        """The values a runs column holds (for checking filter values); `column` is one of RUN_COLUMNS."""
        if column not in RUN_COLUMNS:
            raise ValueError(f"not a runs column: {column}")
        with self.connect() as conn:
            return [row[0] for row in conn.execute(f"SELECT DISTINCT {column} FROM runs")]

    def resolve_ids(self, prefixes: list[str]) -> tuple[str, ...]:
        """Full run ids for ids or unique prefixes (the rules of `get_run`)."""
        return tuple(self._resolve(prefix) for prefix in prefixes)

    def _resolve(self, run_id: str) -> str:
        with self.connect() as conn:
            if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone():
                return run_id
            matches = conn.execute("SELECT id FROM runs WHERE id LIKE ? ESCAPE '\\' ORDER BY id",
                                   (like_prefix(run_id),)).fetchall()
            if len(matches) == 1:
                return matches[0][0]
            if len(matches) > 1:
                raise UsageError(f"run id prefix {run_id!r} is ambiguous; valid: "
                                 + ", ".join(m[0] for m in matches[:10]))
            recent = [r[0] for r in conn.execute("SELECT id FROM runs ORDER BY created_at DESC LIMIT 200")]
        raise unknown_name("run id", run_id, recent)

    def get_run(self, run_id: str) -> dict[str, Any]:
        run_id = self._resolve(run_id)
        with self.connect() as conn:
            row = conn.execute(f"SELECT {', '.join(RUN_COLUMNS)}, key, plan, provenance FROM runs WHERE id = ?",
                               (run_id,)).fetchone()
            results = conn.execute("SELECT data FROM results WHERE run_id = ? ORDER BY metric",
                                   (run_id,)).fetchall()
        return _full_run(row, [r[0] for r in results])

    def get_runs(self, filters: Filters) -> list[dict[str, Any]]:
        """Every run `filters` selects, as `get_run` gives it, sorted by id: two queries in one connection
        (exports read thousands of runs)."""
        clause, params = where(filters)
        with self.connect() as conn:
            rows = conn.execute(f"SELECT r.{', r.'.join(RUN_COLUMNS)}, r.key, r.plan, r.provenance FROM runs r "
                                f"{clause} ORDER BY r.id", params).fetchall()
            results: dict[str, list[str]] = {}
            for run_id, data in conn.execute(f"SELECT res.run_id, res.data FROM results res JOIN runs r "
                                             f"ON r.id = res.run_id {clause} ORDER BY res.run_id, res.metric", params):
                results.setdefault(run_id, []).append(data)
        return [_full_run(row, results.get(row[0], [])) for row in rows]

    def grouped_values(self, filters: Filters, by_site: bool = False) -> list[dict[str, Any]]:
        """The primary values of successful runs, grouped in SQL by key (and site): one row per group
        with its key, metric, unit, run ids and values (in matching order), and the image names seen."""
        clause, params = where(filters)
        # The unary + keeps SQLite from walking the status or key index over the whole table (a random
        # read per run, 3x slower than one pass over 100,000 runs); the filters' own indexes still apply.
        clause = (clause + " AND " if clause else "WHERE ") + "+r.status = 'ok'"
        site = "r.site" if by_site else "NULL"
        metrics = ", ".join(f"'{m}'" for m in PRIMARY_METRICS)
        query = (f"SELECT r.key_hash, r.key, {site}, res.metric, res.unit, count(*), "
                 "group_concat(r.id, ' '), group_concat(printf('%.17g', res.value), ' '), "
                 "group_concat(DISTINCT r.image) "
                 f"FROM runs r JOIN results res ON res.run_id = r.id AND res.metric IN ({metrics}) "
                 f"{clause} GROUP BY +r.key_hash, {site}, res.metric, res.unit")
        with self.connect() as conn:
            rows = conn.execute(query, params).fetchall()
        return [{"key_hash": kh, "key": json.loads(key) if key else None, "site": st, "metric": metric,
                 "unit": unit, "n": n, "run_ids": ids.split(" "), "values": [float(v) for v in values.split(" ")],
                 "images": sorted(images.split(",")) if images else []}
                for kh, key, st, metric, unit, n, ids, values, images in rows]

    def latest_matmul(self, system: str, precision: str) -> dict[str, Any] | None:
        """The newest stored matrix-multiply rate of `system` at `precision` (run id, time, GFLOP/s, data)."""
        with self.connect() as conn:
            row = conn.execute(
                "SELECT r.id, r.created_at, res.value, res.data FROM runs r JOIN results res "
                "ON res.run_id = r.id AND res.metric = 'matmul' WHERE r.workload = 'matmul' AND r.system = ? "
                "AND r.precision = ? AND r.status = 'ok' ORDER BY r.created_at DESC, r.id DESC LIMIT 1",
                (system, precision)).fetchone()
        if row is None:
            return None
        return {"run_id": row[0], "created_at": row[1], "gflops": row[2], "data": json.loads(row[3])}


def _full_run(row: tuple, results: list[str]) -> dict[str, Any]:
    """A runs row (RUN_COLUMNS, key, plan, provenance) and its results' data as one record."""
    run = dict(zip(RUN_COLUMNS, row[: len(RUN_COLUMNS)]))
    run["key"] = json.loads(row[-3]) if row[-3] else None
    run["plan"] = json.loads(row[-2])
    run["provenance"] = json.loads(row[-1])
    run["results"] = [json.loads(data) for data in results]
    return run
