"""SQLite result store: WAL mode, one transaction per run, safe for parallel writers."""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dlrun.errors import UsageError

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

RUN_COLUMNS = ("id", "created_at", "finished_at", "status", "workload", "model", "image", "image_digest",
               "system", "scheduler", "launcher", "runtime", "fabric", "nodes", "ranks_per_node",
               "world_size", "batch_size", "precision", "run_dir")


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
            conn.executescript(SCHEMA)
            yield conn
        finally:
            conn.close()

    def add_run(self, run: dict[str, Any], results: list[dict[str, Any]]) -> None:
        """Insert a run and its result rows atomically (BEGIN IMMEDIATE takes the write lock up front)."""
        row = {col: run.get(col) for col in RUN_COLUMNS}
        row["plan"] = json.dumps(run["plan"], sort_keys=True)
        row["provenance"] = json.dumps(run.get("provenance", {}), sort_keys=True)
        cols = list(row)
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

    def list_runs(self, limit: int | None = 50) -> list[dict[str, Any]]:
        query = (f"SELECT r.{', r.'.join(RUN_COLUMNS)}, res.value, res.unit FROM runs r "
                 "LEFT JOIN results res ON res.run_id = r.id AND res.metric IN ('throughput', 'busbw') "
                 "ORDER BY r.created_at DESC, r.id DESC")
        params: tuple = ()
        if limit is not None:
            query += " LIMIT ?"
            params = (limit,)
        with self.connect() as conn:
            rows = conn.execute(query, params).fetchall()
        return [dict(zip((*RUN_COLUMNS, "value", "unit"), row)) for row in rows]

    def get_run(self, run_id: str) -> dict[str, Any]:
        with self.connect() as conn:
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
