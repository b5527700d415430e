"""The result store's schema: version 1 as first shipped, the migrations that bring a store of any older
version up to date in place (in one write transaction), and the run columns every query reads.

Schema versions live in `PRAGMA user_version` (SQLite) or the one-row table `dlrun_schema` (PostgreSQL: the
backend's `Versions`, which also spells each statement in its DDL). Every later version is a list of statements in `MIGRATIONS`,
plus a Python step that fills new columns of existing rows. A fresh store is created at version 1 and
migrated like any other, so a new and an upgraded store hold exactly the same schema."""
from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlrun.errors import DlrunError
from dlrun.results.fingerprint import fingerprint_of
from dlrun.results.quality import run_quality
from dlrun.results.site import local_site
from dlrun.results.store import samples

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
    3: (
        "ALTER TABLE runs ADD COLUMN fingerprint TEXT",   # the machine it ran on (dlrun.results.fingerprint)
        "ALTER TABLE runs ADD COLUMN quality TEXT",       # its quality verdict and reasons (dlrun.results.quality)
        "ALTER TABLE runs ADD COLUMN verdict TEXT",       # the verdict alone, for compare's grouping
    ),
    4: (),  # no new column: every key computed again (it holds the env, the code path, the CPU's identity)
    5: (),  # no new column: the architecture each run's code ran as, its quality and key judged again
    6: samples.SCHEMA,  # the aggregates compare and report read (dlrun.results.store.samples)
}
SCHEMA_VERSION = max(MIGRATIONS)

RUN_COLUMNS = ("id", "created_at", "finished_at", "status", "workload", "model", "image", "image_digest",
               "system", "scheduler", "launcher", "runtime", "fabric", "nodes", "ranks_per_node",
               "world_size", "batch_size", "precision", "run_dir", "site", "origin", "experiment", "point",
               "key_hash", "verdict")
#: Origins a run may have: launched here, imported from another tool's log, or read from a results bundle.
ORIGINS = ("local", "import-log", "bundle")
#: The metrics a run is judged by (one per run): training throughput, collective bus bandwidth, and what a
#: site's own command reports: point-to-point or storage bandwidth, latency (lower is better); a storage
#: workload's read bandwidth (GB/s) or small-file read rate (files/s).
PRIMARY_METRICS = ("throughput", "busbw", "bandwidth", "latency", "read_bandwidth", "file_read_rate")
_SPJ = "json_extract(res.data, '$.extra.telemetry.samples_per_joule')"
#: What `compare --metric` compares: (SQL text of one result row's value, the result metrics it is read from).
#: The rate is read as stored; another value as text. A run without the value gives a word Python's float() reads: 'nan' where the run's telemetry could read no
#: energy, '-inf' where it had none; never a number (printf would turn NULL into 0).
COMPARED_VALUES = {
    "rate": ("res.value", PRIMARY_METRICS),  # the stored double itself (printf's %.17g can be an ulp off)
    "samples-per-joule": (f"CASE WHEN json_extract(res.data, '$.extra.telemetry') IS NULL THEN '-inf' "
                          f"WHEN {_SPJ} IS NULL THEN 'nan' ELSE printf('%.17g', {_SPJ}) END", ("throughput",)),
}


def too_new_error(version: int) -> DlrunError:
    return DlrunError(f"the result store has schema version {version}; this dlrun reads up to {SCHEMA_VERSION}: "
                      "upgrade dlrun")


@dataclass(frozen=True)
class Versions:
    """How a backend keeps its schema version (SQLite: `PRAGMA user_version`; PostgreSQL: a one-row table),
    starts its write transaction (holding the store's write lock from the start), and spells a statement of
    SCHEMA_V1 and MIGRATIONS in its own DDL."""

    read: Callable[[Any], int]
    write: Callable[[Any, int], None]
    begin: Callable[[Any], None]
    ddl: Callable[[str], str] = str


SQLITE = Versions(read=lambda conn: conn.execute("PRAGMA user_version").fetchone()[0],
                  write=lambda conn, version: conn.execute(f"PRAGMA user_version = {int(version)}"),
                  begin=lambda conn: conn.execute("BEGIN IMMEDIATE"))


def ensure_schema(conn: Any, versions: Versions = SQLITE) -> None:
    """Create the schema, or upgrade an older store in place, in one write transaction.

    Cheap when the store is current (one read of the version). Concurrent first users serialise on the write
    lock, and the one that comes second finds the work done."""
    version = versions.read(conn)
    if version == SCHEMA_VERSION:
        return
    if version > SCHEMA_VERSION:
        raise too_new_error(version)
    versions.begin(conn)
    try:
        version = versions.read(conn)
        if version < SCHEMA_VERSION:
            if version == 0:
                for statement in SCHEMA_V1.split(";"):
                    if statement.strip():
                        conn.execute(versions.ddl(statement))
                version = 1
            for target in range(version + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[target]:
                    conn.execute(versions.ddl(statement))
                _FILL[target](conn)
            versions.write(conn, SCHEMA_VERSION)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def keyed(run: dict[str, Any], results: list[dict[str, Any]], key: dict[str, Any] | None = None) -> tuple[str, str]:
    """(key JSON, key hash) of a run (its own `key`, else the one made from its record). The key's module, and the
    catalog's models with it, is imported here, by the writes and upgrades that need it: a command that only reads
    the store (`results list`) does not load the catalog."""
    from dlrun.results.key import key_from_run, key_hash, key_json

    key = key or key_from_run(run, results)
    return key_json(key), key_hash(key)


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
        key, digest = keyed(run, results)
        conn.execute("UPDATE runs SET site = ?, origin = ?, key = ?, key_hash = ? WHERE id = ?",
                     (site, origin, key, digest, run["id"]))


def _fill_v3(conn: sqlite3.Connection) -> None:
    """Existing runs get a fingerprint where their run directory still holds the inventory of the node that ran
    them (a local run), a quality verdict (`unknown` without the harness's figures), and their key again: it
    now holds the site and the machine (unknown where no fingerprint could be recovered)."""
    cols = ("id", "status", "workload", "model", "image", "image_digest", "system", "scheduler", "fabric", "nodes",
            "world_size", "batch_size", "precision", "run_dir", "site", "origin")
    rows = conn.execute(f"SELECT {', '.join(cols)}, plan, provenance FROM runs").fetchall()
    for row in rows:
        run = dict(zip(cols, row[:len(cols)]))
        run["plan"], run["provenance"] = json.loads(row[-2]), json.loads(row[-1])
        results = [json.loads(r[0]) for r in conn.execute(
            "SELECT data FROM results WHERE run_id = ? ORDER BY metric", (run["id"],))]
        run["fingerprint"] = recovered_fingerprint(run, results)
        quality = run_quality(run["status"], results)
        key, digest = keyed(run, results)
        conn.execute("UPDATE runs SET fingerprint = ?, quality = ?, verdict = ?, key = ?, key_hash = ? WHERE id = ?",
                     (json.dumps(run["fingerprint"], sort_keys=True) if run["fingerprint"] else None,
                      json.dumps(quality, sort_keys=True), quality["verdict"], key, digest, run["id"]))


#: The largest inventory.json read back while upgrading (a node inventory is a few KiB).
MAX_INVENTORY_BYTES = 4 << 20


def recovered_fingerprint(run: dict, results: list[dict], inventory: dict | None = None) -> dict | None:
    """The fingerprint of a run stored before fingerprints existed: from what its job reported, else from the
    inventory of the node dlrun ran the job on (a local run): `inventory`, or its run directory's inventory.json."""
    local = run.get("origin") == "local" and run.get("scheduler") in (None, "local")
    if not local:
        inventory = None
    elif inventory is None and run.get("run_dir"):
        path = Path(run["run_dir"]) / "inventory.json"
        try:
            if path.is_file() and path.stat().st_size <= MAX_INVENTORY_BYTES:
                inventory = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError):
            inventory = None
    result = results[0] if results else None
    if not (isinstance(inventory, dict) or (result and isinstance(result.get("extra"), dict)
                                             and "node" in result["extra"])):
        return None
    return fingerprint_of(result=result, inventory=inventory if isinstance(inventory, dict) else None,
                          fabric=run.get("fabric"), nodes=run.get("nodes")) or None


def _fill_v4(conn: sqlite3.Connection) -> None:
    """Every run's key again, from its stored record: the key now holds the variables of its environment that
    decide performance, the code path of its step and the CPU's identity and instruction set (unknown where
    the run did not record them)."""
    cols = ("id", "status", "workload", "model", "image", "image_digest", "system", "scheduler", "fabric", "nodes",
            "world_size", "batch_size", "precision", "site", "origin")
    rows = conn.execute(f"SELECT {', '.join(cols)}, plan, provenance, fingerprint FROM runs").fetchall()
    for row in rows:
        run = dict(zip(cols, row[:len(cols)]))
        run["plan"], run["provenance"] = json.loads(row[-3]), json.loads(row[-2])
        run["fingerprint"] = json.loads(row[-1]) if row[-1] else None
        results = [json.loads(r[0]) for r in conn.execute(
            "SELECT data FROM results WHERE run_id = ? ORDER BY metric", (run["id"],))]
        conn.execute("UPDATE runs SET key = ?, key_hash = ? WHERE id = ?", (*keyed(run, results), run["id"]))


def _fill_v5(conn: sqlite3.Connection) -> None:
    """Every run's fingerprint gains the architecture its job's code ran as (and the node CPU's, where that
    was emulated), from what the job reported; its quality and key are judged again: an emulated run is no
    hardware figure, and is never pooled with a native one."""
    from dlrun.results.fingerprint import arch_fields

    cols = ("id", "status", "workload", "model", "image", "image_digest", "system", "scheduler", "fabric", "nodes",
            "world_size", "batch_size", "precision", "site", "origin")
    rows = conn.execute(f"SELECT {', '.join(cols)}, plan, provenance, fingerprint FROM runs").fetchall()
    for row in rows:
        run = dict(zip(cols, row[:len(cols)]))
        run["plan"], run["provenance"] = json.loads(row[-3]), json.loads(row[-2])
        fingerprint = json.loads(row[-1]) if row[-1] else None
        results = [json.loads(r[0]) for r in conn.execute(
            "SELECT data FROM results WHERE run_id = ? ORDER BY metric", (run["id"],))]
        extra = results[0].get("extra") if results and isinstance(results[0].get("extra"), dict) else {}
        if isinstance(fingerprint, dict) and isinstance(extra.get("node"), dict):
            fingerprint.update({k: v for k, v in arch_fields(extra["node"]).items() if isinstance(v, str)})
        run["fingerprint"] = fingerprint
        quality = run_quality(run["status"], results)
        key, digest = keyed(run, results)
        conn.execute("UPDATE runs SET fingerprint = ?, quality = ?, verdict = ?, key = ?, key_hash = ? WHERE id = ?",
                     (json.dumps(fingerprint, sort_keys=True) if fingerprint else None,
                      json.dumps(quality, sort_keys=True), quality["verdict"], key, digest, run["id"]))


def _fill_v6(conn: sqlite3.Connection) -> None:
    """The aggregates of every stored run (a later migration that changes keys or verdicts calls it again)."""
    samples.rebuild(conn, PRIMARY_METRICS)


_FILL = {2: _fill_v2, 3: _fill_v3, 4: _fill_v4, 5: _fill_v5, 6: _fill_v6}
