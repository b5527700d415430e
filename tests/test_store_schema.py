"""Store schema version 3: an existing store is upgraded in place (version 2: site, origin, experiment and
key; version 3: the machine's fingerprint and the quality verdict, the key again with site and machine), the
list filters select in SQL, and every run records its site. Real SQLite files throughout."""
from __future__ import annotations

import json
import multiprocessing as mp
import sqlite3

import pytest
from conftest import run_cli

from dlrun.errors import DlrunError, UsageError
from dlrun.preflight import node_inventory
from dlrun.results.fingerprint import short_cpu_name
from dlrun.results.key import key_from_run, key_hash
from dlrun.results.store.query import Filters, parse_since
from dlrun.results.site import host_domain, local_site
from dlrun.results.store import SCHEMA_VERSION, Store

# The schema as dlrun shipped it before versioning (commit 19374f6), copied here so that a later edit of
# the store module cannot change what "an old store" means.
V1_DDL = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, created_at TEXT NOT NULL, finished_at TEXT, status TEXT NOT NULL,
    workload TEXT, model TEXT, image TEXT, image_digest TEXT, system TEXT,
    scheduler TEXT, launcher TEXT, runtime TEXT, fabric TEXT,
    nodes INTEGER, ranks_per_node INTEGER, world_size INTEGER, batch_size INTEGER, precision TEXT,
    run_dir TEXT, plan TEXT NOT NULL, provenance TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_created ON runs(created_at);
CREATE TABLE IF NOT EXISTS results (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, metric TEXT NOT NULL, value REAL NOT NULL,
    unit TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (run_id, metric)
);
"""
V1_PLAN = {"workload": {"name": "resnet50", "kind": "cnn-training", "framework": "pytorch", "dataset": "synthetic",
                        "model": "resnet50_v1.5"},
           "image": {"name": "host", "kind": "host", "framework": "pytorch", "framework_version": None},
           "world_size": 2, "global_batch_size": 32}
V1_RESULT = {"kind": "dlrun-harness", "metric": "throughput", "value": 7.3, "unit": "images/sec",
             "model": "resnet50_v1.5", "batch_size": 16, "num_devices": 2,
             "extra": {"framework": "pytorch", "framework_version": "2.13.0", "global_batch_size": 32}}


def _old_store(path, run_dir=None) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(V1_DDL)
    conn.execute("INSERT INTO runs (id, created_at, status, workload, model, image, system, scheduler, fabric, "
                 "nodes, ranks_per_node, world_size, batch_size, precision, run_dir, plan, provenance) "
                 "VALUES ('old-1', '2026-01-01T00:00:00Z', 'ok', 'resnet50', 'resnet50_v1.5', 'host', "
                 "'localhost', 'local', 'tcp', 1, 2, 2, 16, 'fp32', ?, ?, ?)",
                 (run_dir, json.dumps(V1_PLAN), json.dumps({"harness_sha256": "sha256:" + "ab" * 32})))
    conn.execute("INSERT INTO results VALUES ('old-1', 'throughput', 7.3, 'images/sec', ?)", (json.dumps(V1_RESULT),))
    conn.execute("INSERT INTO runs (id, created_at, status, workload, system, world_size, plan, provenance) "
                 "VALUES ('old-2', '2026-01-02T00:00:00Z', 'ok', 'nccl-tests:all_reduce', 'dgx2', 8, ?, ?)",
                 (json.dumps({"origin": "import-log", "format": "nccl-tests", "collective": "all_reduce"}),
                  json.dumps({"origin": "import-log"})))
    conn.commit()
    conn.close()


def _schema(path) -> set[str]:
    conn = sqlite3.connect(path)
    rows = {" ".join(sql.split()) for (sql,) in conn.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL")}
    conn.close()
    return rows


def test_an_old_store_is_upgraded_in_place(tmp_path, monkeypatch):
    monkeypatch.setenv("DLRUN_SITE", "lab.example.org")
    path = tmp_path / "results.sqlite"
    run_dir = tmp_path / "runs" / "old-1"  # a local run's directory keeps the inventory of the node it ran on
    run_dir.mkdir(parents=True)
    inventory = node_inventory()
    (run_dir / "inventory.json").write_text(json.dumps(inventory))
    _old_store(path, str(run_dir))
    store = Store(path)
    runs = {r["id"]: r for r in store.list_runs(None)}
    assert set(runs) == {"old-1", "old-2"}
    assert runs["old-1"]["site"] == "lab.example.org" and runs["old-1"]["origin"] == "local"
    assert runs["old-2"]["origin"] == "import-log" and runs["old-1"]["value"] == 7.3
    old = store.get_run("old-1")
    assert old["key"]["image_digest"] == "host:harness-" + "ab" * 8 and old["key"]["global_batch"] == 32
    assert old["key_hash"] == key_hash(key_from_run(old, old["results"]))
    conn = sqlite3.connect(path)
    assert old["fingerprint"]["node_from"] == "inventory" and old["key"]["site"] == "lab.example.org"
    assert (old["key"]["cpu"], old["key"]["memory_gib"]) == (short_cpu_name(inventory["cpu"]["model"]),
                                                             round(inventory["memory_gb"]))
    assert old["quality"]["verdict"] == runs["old-1"]["verdict"] == "unknown"  # no figures of its timed steps
    imported = store.get_run("old-2")  # a log: nobody said which machine, so no machine can be shown to match
    assert imported["fingerprint"] is None and imported["key"]["cpu"] == imported["key"]["cuda"] == "unknown"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
    # version 6: the old run's aggregates, made from its stored row (the second run has no primary result)
    assert conn.execute("SELECT n, min, max, newest FROM samples").fetchall() == [(1, 7.3, 7.3, "2026-01-01T00:00:00Z")]
    assert conn.execute("SELECT run_id, value FROM sample_runs").fetchall() == [("old-1", 7.3)]
    indexes = {row[1] for row in conn.execute("PRAGMA index_list(runs)")}
    assert {"runs_created", "runs_workload", "runs_system", "runs_image", "runs_status", "runs_site",
            "runs_experiment", "runs_key"} <= indexes
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    fresh = tmp_path / "fresh.sqlite"
    assert Store(fresh).list_runs() == [] and not fresh.exists()  # reading creates nothing
    with Store(fresh).connect():  # the first writer creates it
        pass
    assert _schema(fresh) == _schema(path)  # an upgraded store and a new one hold the same schema


def _open(path: str) -> int:
    return len(Store(path).list_runs(None))


def test_concurrent_first_users_upgrade_once(tmp_path):
    path = tmp_path / "results.sqlite"
    _old_store(path)
    with mp.get_context("spawn").Pool(4) as pool:
        assert pool.map(_open, [str(path)] * 8) == [2] * 8
    conn = sqlite3.connect(path)
    assert [c[1] for c in conn.execute("PRAGMA table_info(runs)")].count("key_hash") == 1
    assert conn.execute("SELECT count(*) FROM runs WHERE key_hash IS NULL").fetchone()[0] == 0


def test_a_store_from_a_newer_dlrun_is_refused(tmp_path):
    path = tmp_path / "results.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 9")
    conn.close()
    with pytest.raises(DlrunError, match="schema version 9; this dlrun reads up to 6: upgrade dlrun"):
        Store(path).list_runs()


def _run(run_id, created, **fields):
    return {"id": run_id, "created_at": created, "status": "ok", "plan": {}, "provenance": {}, **fields}


@pytest.fixture
def filled(store_location, monkeypatch):
    monkeypatch.setenv("DLRUN_SITE", "here")
    return _fill(Store(store_location))


def _fill(store: Store) -> Store:
    store.add_run(_run("a", "2026-01-01T00:00:00Z", workload="resnet50", system="dgx2", image="tf1.14-nccl",
                       image_digest="sha256:" + "1" * 64), [])
    store.add_run(_run("b", "2026-02-01T00:00:00Z", workload="resnet50", system="rtx-ts4", site="bnl",
                       experiment="ren-table3", point="rtx-1"), [])
    store.add_run(_run("c", "2026-03-01T00:00:00Z", workload="resnet18", system="dgx2", status="failed"), [])
    return store


@pytest.mark.parametrize("filters, expected", [
    (Filters(), ["c", "b", "a"]),
    (Filters(workload=("resnet50",)), ["b", "a"]),
    (Filters(system=("dgx2",), workload=("resnet50",)), ["a"]),
    (Filters(system=("dgx2", "rtx-ts4")), ["c", "b", "a"]),
    (Filters(image=("tf1.14-nccl",)), ["a"]),
    (Filters(image=("sha256:111",)), ["a"]),
    (Filters(status=("failed",)), ["c"]),
    (Filters(site=("bnl",)), ["b"]),
    (Filters(site=("here",)), ["c", "a"]),
    (Filters(experiment=("ren-table3",)), ["b"]),
    (Filters(since="2026-02-01T00:00:00Z"), ["c", "b"]),
    (Filters(run_ids=("a", "c")), ["c", "a"]),
])
def test_list_filters_select_in_sql(filled, filters, expected):
    assert [r["id"] for r in filled.list_runs(None, filters)] == expected


def test_since_takes_dates_times_and_ages():
    assert parse_since("2026-11-01") == "2026-11-01T00:00:00Z"
    assert parse_since("2026-11-01T12:30") == "2026-11-01T12:30:00Z"
    assert parse_since("7d", now=7 * 86400 + 60) == "1970-01-01T00:01:00Z"
    assert parse_since("90m", now=5400) == "1970-01-01T00:00:00Z"
    with pytest.raises(UsageError, match=r"bad --since 'last week'; valid: a date \(2026-11-01\)"):
        parse_since("last week")


def test_bad_filter_values_name_the_closest_stored_value(tmp_path, dlrun_home, monkeypatch):
    monkeypatch.setenv("DLRUN_SITE", "here")
    filled = _fill(Store(tmp_path / "r.sqlite"))
    dlrun_home.mkdir(parents=True, exist_ok=True)
    (dlrun_home / "results.sqlite").write_bytes(filled.path.read_bytes())
    for args, message in (
        (["--workload", "resnet5"], "bad --workload 'resnet5': no stored run has it; did you mean 'resnet50'? "
                                    "stored: resnet18, resnet50"),
        (["--system", "dgx-2"], "bad --system 'dgx-2': no stored run has it; did you mean 'dgx2'?"),
        (["--status", "okay"], "bad --status 'okay': no stored run has it; did you mean 'ok'?"),
        (["--since", "yesterday"], "bad --since 'yesterday'"),
    ):
        proc = run_cli("results", "list", *args, env={"DLRUN_HOME": str(dlrun_home)})
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"dlrun: error: {message}")
    proc = run_cli("results", "list", "--system", "rtx-ts4", "--json", env={"DLRUN_HOME": str(dlrun_home)})
    assert [r["id"] for r in json.loads(proc.stdout)] == ["b"]


def test_the_site_comes_from_the_environment_then_the_config_file_then_the_host(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("DLRUN_SITE", "env-site")
    assert local_site() == "env-site"
    monkeypatch.delenv("DLRUN_SITE")
    (tmp_path / "dlrun").mkdir()
    (tmp_path / "dlrun" / "config.yaml").write_text("site: llsc.mit.edu\nother: kept for others\n")
    assert local_site() == "llsc.mit.edu"
    (tmp_path / "dlrun" / "config.yaml").write_text("site: 'two words'\n")
    with pytest.raises(UsageError, match="bad site name 'two words' in .*config.yaml \\(key `site`\\)"):
        local_site()
    assert host_domain("node7.cluster.example.org") == "cluster.example.org"
    assert host_domain("node7") is None and host_domain("node7.localdomain") is None
    monkeypatch.setenv("DLRUN_SITE", "bad/site")
    with pytest.raises(UsageError, match=r"bad site name 'bad/site' in \$DLRUN_SITE"):
        local_site()
