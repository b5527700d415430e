"""SQLite result store: WAL mode, one transaction per run, safe for parallel writers.

Schema versions live in `PRAGMA user_version`. Version 1 is the first schema (`SCHEMA_V1`, kept as it was
shipped); every later version is a list of statements in `MIGRATIONS`, plus a Python step that fills new
columns of existing rows. A fresh store is created at version 1 and migrated like any other, so a new and an
upgraded store hold exactly the same schema. Version 2 adds where a run came from (`site`, `origin`), what
experiment point it belongs to (`experiment`, `point`) and its comparability key (`key`, `key_hash`; see
`dlrun.results.key`), with the indexes that the `results list` filters and `compare` grouping use.

The store is created private to its user (0600), in WAL mode, by whichever writer comes first; concurrent
first writers wait for each other instead of failing (`PRAGMA journal_mode = WAL` and the schema answer
"database is locked" without calling SQLite's busy handler, so they are retried here). Queries open the
store without creating it: a store that does not exist yet reads as empty.
"""
from __future__ import annotations

import json
import os
import random
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from dlrun.errors import DlrunError, UsageError, unknown_name
from dlrun.paths import private_dir
from dlrun.results.key import key_from_run, key_hash, key_json
from dlrun.results.query import Filters, like_prefix, where
from dlrun.results.site import local_site

T = TypeVar("T")
#: How long a writer keeps trying while other writers hold the store (SQLite's busy handler, then retries).
BUSY_TIMEOUT_S = 30
RETRY_FOR_S = 120


class StoreError(DlrunError):
    """The store could not be written (locked for too long, disk full, not writable): one line."""


def _busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def retry_busy(action: Callable[[], T], path: Path, retry_for: float = RETRY_FOR_S) -> T:
    """Run `action`, again after a short random pause while SQLite reports the store locked or busy."""
    deadline = time.monotonic() + retry_for
    pause = 0.02
    while True:
        try:
            return action()
        except sqlite3.OperationalError as exc:
            if not _busy(exc):
                raise StoreError(f"cannot write the result store {str(path)!r}: {exc}") from None
            if time.monotonic() > deadline:
                raise StoreError(f"the result store {str(path)!r} stayed locked for {retry_for:.0f} s ({exc}); "
                                 "another dlrun holds it") from None
            time.sleep(pause * (1 + random.random()))
            pause = min(pause * 2, 1.0)

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


def _too_new(version: int) -> DlrunError:
    return DlrunError(f"the result store has schema version {version}; this dlrun reads up to {SCHEMA_VERSION}: "
                      "upgrade dlrun")


def ensure_schema(conn: sqlite3.Connection) -> None:
    """Create the schema, or upgrade an older store in place, in one write transaction.

    Cheap when the store is current (one pragma read). Concurrent first users serialise on the write
    lock, and the one that comes second finds the work done."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version == SCHEMA_VERSION:
        return
    if version > SCHEMA_VERSION:
        raise _too_new(version)
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


def _set_up(conn: sqlite3.Connection) -> None:
    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        conn.execute("PRAGMA journal_mode = WAL")
    ensure_schema(conn)


def _uri(path: Path, mode: str) -> str:
    return f"file:{urllib.parse.quote(str(path.absolute()))}?mode={mode}"


class Store:
    def __init__(self, path: Path):
        self.path = Path(path)

    def _create_private(self) -> None:
        """The store file, created 0600 before SQLite opens it (its -wal and -shm files take its mode)."""
        private_dir(self.path.parent)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as exc:
            raise StoreError(f"cannot create the result store {str(self.path)!r}: {exc.strerror}") from None
        try:
            if os.fstat(fd).st_mode & 0o077 and os.fstat(fd).st_uid == os.getuid():
                os.fchmod(fd, 0o600)  # a store made by an older dlrun
        finally:
            os.close(fd)

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        """A connection that writes; the first one creates the store (0600, WAL, schema) or upgrades it."""
        self._create_private()
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
            retry_busy(lambda: _set_up(conn), self.path)
            conn.execute("PRAGMA foreign_keys = ON")
            yield conn
        finally:
            conn.close()

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """A connection for queries that creates nothing: a store that does not exist yet, or whose first
        writer has not made its tables yet, reads as an empty store. A store of an older schema is
        upgraded first (through a writing connection: the upgrade is one transaction)."""
        conn = None
        if self.path.is_file():
            for mode in ("rw", "ro"):  # rw lets the last connection remove the -wal/-shm files it used
                try:
                    conn = sqlite3.connect(_uri(self.path, mode), uri=True, timeout=BUSY_TIMEOUT_S,
                                           isolation_level=None)
                    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
                    version = conn.execute("PRAGMA user_version").fetchone()[0]
                    if version > SCHEMA_VERSION:
                        conn.close()
                        raise _too_new(version)
                    if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'"
                                        ).fetchone():
                        conn.close()
                        conn = None
                    elif version < SCHEMA_VERSION:
                        conn.close()
                        conn = None
                        with self.connect():
                            pass
                        continue
                    break
                except sqlite3.OperationalError as exc:
                    if conn is not None:
                        conn.close()
                        conn = None
                    if mode == "ro":
                        raise StoreError(f"cannot read the result store {str(self.path)!r}: {exc}") from None
        if conn is None:
            conn = sqlite3.connect(":memory:", isolation_level=None)
            ensure_schema(conn)
        try:
            yield conn
        finally:
            conn.close()

    def has_run(self, run_id: str) -> bool:
        with self.reading() as conn:
            return conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is not None

    def add_run(self, run: dict[str, Any], results: list[dict[str, Any]]) -> None:
        """Insert a run and its result rows atomically (BEGIN IMMEDIATE takes the write lock up front),
        trying again while other writers hold the store.

        The comparability key is computed here from the record and its rows, so every writer (runs,
        imported logs, bundles, matmul measurements) stores one; a run that names no site was made here."""
        row = {col: run.get(col) for col in RUN_COLUMNS}
        row["site"] = run.get("site") or local_site()
        row["origin"] = run.get("origin") or "local"
        if row["origin"] not in ORIGINS:
            raise ValueError(f"origin {row['origin']!r} is not one of {', '.join(ORIGINS)}")
        key = run.get("key") or key_from_run({**run, "origin": row["origin"]}, results)
        row["key"], row["key_hash"] = key_json(key), key_hash(key)
        row["plan"] = json.dumps(run["plan"], sort_keys=True)
        row["provenance"] = json.dumps(run.get("provenance", {}), sort_keys=True)
        cols = list(row)

        def write() -> None:
            with self.connect() as conn:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute(f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                                 [row[c] for c in cols])
                    conn.executemany(
                        "INSERT INTO results (run_id, metric, value, unit, data) VALUES (?, ?, ?, ?, ?)",
                        [(run["id"], r["metric"], r["value"], r["unit"], json.dumps(r, sort_keys=True))
                         for r in results])
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise

        retry_busy(write, self.path)

    def list_runs(self, limit: int | None = 50, filters: Filters | None = None) -> list[dict[str, Any]]:
        clause, params = where(filters or Filters())
        metrics = ", ".join(f"'{m}'" for m in PRIMARY_METRICS)
        query = (f"SELECT r.{', r.'.join(RUN_COLUMNS)}, res.value, res.unit FROM runs r "
                 f"LEFT JOIN results res ON res.run_id = r.id AND res.metric IN ({metrics}) "
                 f"{clause} ORDER BY r.created_at DESC, r.id DESC")
        if limit is not None:
            query += " LIMIT ?"
            params.append(limit)
        with self.reading() as conn:
            rows = conn.execute(query, params).fetchall()
        return [dict(zip((*RUN_COLUMNS, "value", "unit"), row)) for row in rows]

    def distinct(self, column: str) -> list[str]:
        """The values a runs column holds (for checking filter values); `column` is one of RUN_COLUMNS."""
        if column not in RUN_COLUMNS:
            raise ValueError(f"not a runs column: {column}")
        with self.reading() as conn:
            return [row[0] for row in conn.execute(f"SELECT DISTINCT {column} FROM runs")]

    def resolve_ids(self, prefixes: list[str]) -> tuple[str, ...]:
        """Full run ids for ids or unique prefixes (the rules of `get_run`)."""
        return tuple(self._resolve(prefix) for prefix in prefixes)

    def _resolve(self, run_id: str) -> str:
        with self.reading() as conn:
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
        with self.reading() as conn:
            row = conn.execute(f"SELECT {', '.join(RUN_COLUMNS)}, key, plan, provenance FROM runs WHERE id = ?",
                               (run_id,)).fetchone()
            results = conn.execute("SELECT data FROM results WHERE run_id = ? ORDER BY metric",
                                   (run_id,)).fetchall()
        run = dict(zip(RUN_COLUMNS, row[: len(RUN_COLUMNS)]))
        run["key"] = json.loads(row[-3]) if row[-3] else None
        run["plan"] = json.loads(row[-2])
        run["provenance"] = json.loads(row[-1])
        run["results"] = [json.loads(r[0]) for r in results]
        return run

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
        with self.reading() as conn:
            rows = conn.execute(query, params).fetchall()
        return [{"key_hash": kh, "key": json.loads(key) if key else None, "site": st, "metric": metric,
                 "unit": unit, "n": n, "run_ids": ids.split(" "), "values": [float(v) for v in values.split(" ")],
                 "images": sorted(images.split(",")) if images else []}
                for kh, key, st, metric, unit, n, ids, values, images in rows]

    def latest_matmul(self, system: str, precision: str) -> dict[str, Any] | None:
        """The newest stored matrix-multiply rate of `system` at `precision` (run id, time, GFLOP/s, data)."""
        with self.reading() as conn:
            row = conn.execute(
                "SELECT r.id, r.created_at, res.value, res.data FROM runs r JOIN results res "
                "ON res.run_id = r.id AND res.metric = 'matmul' WHERE r.workload = 'matmul' AND r.system = ? "
                "AND r.precision = ? AND r.status = 'ok' ORDER BY r.created_at DESC, r.id DESC LIMIT 1",
                (system, precision)).fetchone()
        if row is None:
            return None
        return {"run_id": row[0], "created_at": row[1], "gflops": row[2], "data": json.loads(row[3])}
