"""The result store's schema: version 1 as first shipped, the migrations that bring a store of any older
version up to date in place (in one write transaction), and the run columns every query reads.

Schema versions live in `PRAGMA user_version`. Every later version is a list of statements in `MIGRATIONS`,
plus a Python step that fills new columns of existing rows. A fresh store is created at version 1 and
migrated like any other, so a new and an upgraded store hold exactly the same schema."""
from __future__ import annotations

import json
import sqlite3

from dlrun.errors import DlrunError
from dlrun.results.key import key_from_run, key_hash, key_json
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


def too_new_error(version: int) -> DlrunError:
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
        raise too_new_error(version)
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
