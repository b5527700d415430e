"""The SQLite store: atomic runs, WAL, parallel writers, secrets never recorded."""
from __future__ import annotations

import json
import multiprocessing as mp
import sqlite3

import pytest

from dlrun.execute.envcapture import REDACTED, capture_environment, redact
from dlrun.results.store import Store


def _record(run_id: str) -> dict:
    return {"id": run_id, "created_at": "2026-01-01T00:00:00Z", "status": "ok", "workload": "w",
            "plan": {"x": 1}, "provenance": {"p": 2}, "world_size": 2}


def _writer(path: str, worker: int, count: int) -> None:
    store = Store(path)
    for i in range(count):
        store.add_run(_record(f"w{worker}-{i}"),
                      [{"metric": "throughput", "value": float(i), "unit": "images/sec"}])


def test_parallel_writers_lose_nothing(tmp_path):
    path = tmp_path / "results.sqlite"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), w, 40)) for w in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 240
    assert conn.execute("SELECT count(*) FROM results").fetchone()[0] == 240


def test_a_failing_insert_leaves_no_partial_run(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    bad_rows = [{"metric": "throughput", "value": 1.0, "unit": "x"}, {"metric": "throughput", "value": 2.0, "unit": "x"}]
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE constraint failed"):
        store.add_run(_record("dup"), bad_rows)  # duplicate (run_id, metric) violates the primary key
    assert store.list_runs() == []


def test_get_run_by_prefix_and_round_trip(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    store.add_run(_record("20260101-000000-abcdef"), [{"metric": "throughput", "value": 3.0, "unit": "images/sec"}])
    run = store.get_run("20260101-000000-ab")
    assert run["plan"] == {"x": 1} and run["results"][0]["value"] == 3.0


def test_secrets_are_redacted():
    env = {"HF_TOKEN": "t0k", "AWS_SECRET_ACCESS_KEY": "s3", "DB_PASSWORD": "pw", "MY_API_KEY": "k",
           "GCP_CREDENTIALS": "c", "api_token_lower": "x", "PATH": "/usr/bin", "HOME": "/root"}
    out = redact(env)
    assert out["PATH"] == "/usr/bin" and out["HOME"] == "/root"
    for name in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "MY_API_KEY", "GCP_CREDENTIALS",
                 "api_token_lower"):
        assert out[name] == REDACTED
    captured = json.dumps(capture_environment(env))
    for secret in ("t0k", "s3", "pw", '"k"', '"c"'):
        assert secret not in captured
