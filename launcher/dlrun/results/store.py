"""SQLite result store: WAL mode, one transaction per run, safe for parallel writers.

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

from dlrun.errors import DlrunError, UsageError
from dlrun.paths import private_dir

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

SCHEMA = """
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

def _set_up(conn: sqlite3.Connection) -> None:
    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        conn.execute("PRAGMA journal_mode = WAL")
    conn.executescript(SCHEMA)


RUN_COLUMNS = ("id", "created_at", "finished_at", "status", "workload", "model", "image", "image_digest",
               "system", "scheduler", "launcher", "runtime", "fabric", "nodes", "ranks_per_node",
               "world_size", "batch_size", "precision", "run_dir")


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
        """A connection that writes; the first one creates the store (0600, WAL, schema)."""
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
        writer has not made its tables yet, reads as an empty store."""
        conn = None
        if self.path.is_file():
            for mode in ("rw", "ro"):  # rw lets the last connection remove the -wal/-shm files it used
                try:
                    conn = sqlite3.connect(_uri(self.path, mode), uri=True, timeout=BUSY_TIMEOUT_S,
                                           isolation_level=None)
                    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
                    if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'"
                                        ).fetchone():
                        conn.close()
                        conn = None
                    break
                except sqlite3.OperationalError as exc:
                    if conn is not None:
                        conn.close()
                        conn = None
                    if mode == "ro":
                        raise StoreError(f"cannot read the result store {str(self.path)!r}: {exc}") from None
        if conn is None:
            conn = sqlite3.connect(":memory:", isolation_level=None)
            conn.executescript(SCHEMA)
        try:
            yield conn
        finally:
            conn.close()

    def has_run(self, run_id: str) -> bool:
        with self.reading() as conn:
            return conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is not None

    def add_run(self, run: dict[str, Any], results: list[dict[str, Any]]) -> None:
        """Insert a run and its result rows atomically (BEGIN IMMEDIATE takes the write lock up front),
        trying again while other writers hold the store."""
        row = {col: run.get(col) for col in RUN_COLUMNS}
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

    def list_runs(self, limit: int | None = 50) -> list[dict[str, Any]]:
        query = (f"SELECT r.{', r.'.join(RUN_COLUMNS)}, res.value, res.unit FROM runs r "
                 "LEFT JOIN results res ON res.run_id = r.id AND res.metric IN ('throughput', 'busbw') "
                 "ORDER BY r.created_at DESC, r.id DESC")
        params: tuple = ()
        if limit is not None:
            query += " LIMIT ?"
            params = (limit,)
        with self.reading() as conn:
            rows = conn.execute(query, params).fetchall()
        return [dict(zip((*RUN_COLUMNS, "value", "unit"), row)) for row in rows]

    def get_run(self, run_id: str) -> dict[str, Any]:
        with self.reading() as conn:
            row = conn.execute(f"SELECT {', '.join(RUN_COLUMNS)}, plan, provenance FROM runs WHERE id = ?",
                               (run_id,)).fetchone()
            if row is None:
                matches = conn.execute("SELECT id FROM runs WHERE id LIKE ? ORDER BY id", (run_id + "%",)).fetchall()
                if len(matches) == 1:
                    return self.get_run(matches[0][0])
                recent = [r[0] for r in conn.execute("SELECT id FROM runs ORDER BY created_at DESC LIMIT 200")]
                from dlrun.errors import unknown_name

                if len(matches) > 1:
                    raise UsageError(f"run id prefix {run_id!r} is ambiguous; valid: "
                                     + ", ".join(m[0] for m in matches[:10]))
                raise unknown_name("run id", run_id, recent)
            results = conn.execute("SELECT data FROM results WHERE run_id = ? ORDER BY metric",
                                   (row[0],)).fetchall()
        run = dict(zip(RUN_COLUMNS, row[: len(RUN_COLUMNS)]))
        run["plan"] = json.loads(row[len(RUN_COLUMNS)])
        run["provenance"] = json.loads(row[len(RUN_COLUMNS) + 1])
        run["results"] = [json.loads(r[0]) for r in results]
        return run
