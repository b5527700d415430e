"""The store: atomic runs, parallel writers, secrets never recorded; on both backends (SQLite, in WAL mode, and
PostgreSQL) where the test is of behaviour, not of the SQLite file."""
from __future__ import annotations

import json
import multiprocessing as mp
import sqlite3
import subprocess
import sys
import time

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
                      [{"metric": "throughput", "value": float(i + 1), "unit": "images/sec"}])


def _write_in_parallel(path, procs) -> sqlite3.Connection:
    """Run the writer processes to the end; the store they wrote, checked whole and in WAL mode."""
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    return conn


def test_parallel_writers_lose_nothing(store_location):
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(store_location), w, 40)) for w in range(6)]
    store = Store(store_location)
    if store.kind == "sqlite":  # and the file is whole, in WAL mode
        _write_in_parallel(store_location, procs).close()
    else:
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
            assert p.exitcode == 0
    with store.reading() as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 240
        assert conn.execute("SELECT count(*) FROM results").fetchone()[0] == 240


def test_a_failing_insert_leaves_no_partial_run(store_location):
    store = Store(store_location)
    bad_rows = [{"metric": "throughput", "value": 1.0, "unit": "x"}, {"metric": "throughput", "value": 2.0, "unit": "x"}]
    # duplicate (run_id, metric) violates the primary key: sqlite3.IntegrityError on either backend
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE constraint failed|duplicate key value"):
        store.add_run(_record("dup"), bad_rows)
    assert store.list_runs() == []


def test_get_run_by_prefix_and_round_trip(store_location):
    store = Store(store_location)
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


# ----------------------------------------------------------------------------------- first use, read-only
def _first_writer(path: str, worker: int, start) -> None:
    start.wait()  # all eight open the brand-new store at once
    Store(path).add_run(_record(f"w{worker}"), [{"metric": "throughput", "value": 1.0, "unit": "images/sec"}])


@pytest.mark.slow
def test_eight_first_writers_on_eighty_fresh_stores_lose_nothing(tmp_path):
    """Before: `PRAGMA journal_mode = WAL` answered "database is locked" to writers racing on a new store
    (18 of 640 runs lost). Every store here is new; its eight writers start together."""
    ctx = mp.get_context("fork")
    lost = 0
    for index in range(80):
        path = tmp_path / f"store{index}" / "results.sqlite"
        start = ctx.Barrier(8)
        conn = _write_in_parallel(path, [ctx.Process(target=_first_writer, args=(str(path), w, start))
                                         for w in range(8)])
        lost += 8 - conn.execute("SELECT count(*) FROM runs").fetchone()[0]
        conn.close()
        assert path.stat().st_mode & 0o777 == 0o600
    assert lost == 0


def test_reading_creates_nothing(tmp_path):
    from dlrun.errors import UsageError

    path = tmp_path / "home" / "results.sqlite"
    store = Store(path)
    assert store.list_runs() == [] and not store.has_run("x")
    with pytest.raises(UsageError, match="unknown run id 'x'"):
        store.get_run("x")
    assert not (tmp_path / "home").exists()
    path.parent.mkdir()
    path.touch()  # a first writer has created the file but not its tables yet
    assert store.list_runs() == []
    assert [p.name for p in path.parent.iterdir()] == ["results.sqlite"]


def test_results_commands_on_a_fresh_home_create_no_file(dlrun_home):
    from conftest import run_cli

    assert run_cli("results", "list", "--json").stdout.strip() == "[]"
    proc = run_cli("results", "show", "20260101")
    assert proc.returncode == 2 and proc.stderr.startswith("dlrun: error: unknown run id '20260101'")
    assert not dlrun_home.exists()


def test_a_store_that_cannot_be_written_is_one_line_and_the_run_is_stored_later(dlrun_home):
    """The store is written before the run directory is published: when that fails, the run stays in its
    staging directory (recorded on disk) and the next command that opens the store stores and publishes it."""
    from conftest import cli_json

    # a folder put in the way of the store file once the run has started (at the start, every command
    # refuses a store path that is not a file: see test_store_defends_itself)
    proc = subprocess.Popen([sys.executable, "-m", "dlrun.cli", "run", "trivial", "--steps", "1", "--warmup-steps",
                             "1", "--batch-size", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not list((dlrun_home / "runs").glob(".staging-*/status.json")) and proc.poll() is None:
        time.sleep(0.01)
    (dlrun_home / "results.sqlite").mkdir(parents=True)
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 1
    [line] = stderr.strip().splitlines()
    assert line.startswith(f"dlrun: error: the result store '{dlrun_home / 'results.sqlite'}' is not a regular file")
    assert "the next dlrun command stores it" in line
    [staging] = (dlrun_home / "runs").glob(".staging-*")
    assert json.loads((staging / "status.json").read_text())["state"] == "ok"
    (dlrun_home / "results.sqlite").rmdir()
    [run] = cli_json("results", "list")
    assert run["status"] == "ok" and run["value"] > 0 and run["run_dir"] == str(dlrun_home / "runs" / run["id"])
    assert not list((dlrun_home / "runs").glob(".staging-*"))
    assert (dlrun_home / "runs" / run["id"] / "result.json").is_file()


def test_a_stored_filter_value_is_checked_by_one_look_and_a_missing_one_named_with_the_closest(tmp_path):
    """`results list --workload resnet50` read every workload the store holds (a scan of the column on a server)
    to check one value; a value a run has is now one indexed look, and only a missing one lists the column."""
    from dlrun.errors import UsageError
    from dlrun.results.store.query import Filters, check_values

    store = Store(tmp_path / "results.sqlite")
    store.add_run(_record("20260101-000000-abcdef"), [{"metric": "throughput", "value": 3.0, "unit": "images/sec"}])
    workload = store.list_runs()[0]["workload"]
    listed: list[str] = []

    def stored(column):
        listed.append(column)
        return store.distinct(column)

    check_values(Filters(workload=(workload,), precision=("bf16",), status=("ok",)), stored, None, store.has_value)
    assert listed == []
    with pytest.raises(UsageError, match=f"did you mean {workload!r}"):
        check_values(Filters(workload=(workload + "x",)), stored, None, store.has_value)
    assert listed == ["workload"]
