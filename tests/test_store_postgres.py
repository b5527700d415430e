"""The shared site store on PostgreSQL (dlrun.results.store.backend_postgres), against a real server the tests
start (fixtures_postgres): concurrent writers and a writer SIGKILLed inside its transaction lose no committed
run and leave no half run on either backend, the aggregates stay those of the runs; `store:` in config.yaml
is what every command opens, its password never shown; a bad URL, an unreachable server, a wrong password
are one line; the schema version and its migrations; runs moved between the two backends."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import sqlite3
from pathlib import Path

import pytest
from bundle_data import filled_store
from conftest import cli_json, run_cli
from fixtures_postgres import PASSWORD, new_database
from loopback import free_port
from test_store_samples import assert_aggregates_exact

from dlrun.results.store import SCHEMA_VERSION, Store, StoreError
from dlrun.results.store.location import PostgresUrl, parse_store
from dlrun.results.store.query import Filters

WRITERS, RUNS_EACH, KILLED_COMMITTED, KILLED_PENDING = 4, 12, 3, 5


def _run(run_id: str, value: float, system: str) -> tuple[dict, list[dict]]:
    return ({"id": run_id, "created_at": f"2026-01-01T00:00:{int(value) % 60:02d}Z", "status": "ok",
             "workload": "resnet50", "system": system, "plan": {"x": 1}, "provenance": {"p": run_id},
             "world_size": 2},
            [{"metric": "throughput", "value": value, "unit": "images/sec"},
             {"metric": "step_time", "value": 1 / value, "unit": "s"}])


def _writer(location: str, worker: int) -> None:
    store = Store(location)
    for i in range(RUNS_EACH):  # one transaction per run, racing the other writers
        store.add_runs([_run(f"w{worker}-{i}", 100.0 + i + worker / 10, f"sys{i % 3}")])


def _killed_writer(location: str, inside) -> None:
    """Commits KILLED_COMMITTED runs, then stops inside a transaction that has inserted KILLED_PENDING more
    (rows, results and aggregates written, not committed) and waits there to be killed."""
    store = Store(location)
    for i in range(KILLED_COMMITTED):
        store.add_runs([_run(f"k-{i}", 50.0 + i, "sys0")])

    def pending():
        for i in range(KILLED_PENDING):
            yield _run(f"k-pending-{i}", 70.0 + i, f"sys{i % 3}")
        inside.set()  # every pending run is inserted; the transaction is open
        signal.pause()
    store.add_runs(lambda: pending())


def test_concurrent_writers_and_a_sigkill_lose_no_run(store_location):
    ctx = mp.get_context("spawn")
    inside = ctx.Event()
    killed = ctx.Process(target=_killed_writer, args=(str(store_location), inside))
    writers = [ctx.Process(target=_writer, args=(str(store_location), w)) for w in range(WRITERS)]
    killed.start()
    for proc in writers:
        proc.start()
    while not inside.wait(0.2):  # until it is inside its transaction (or has failed: then no wait)
        assert killed.is_alive(), f"the writer to be killed exited first ({killed.exitcode})"
    os.kill(killed.pid, signal.SIGKILL)  # mid-write: its transaction holds the store's write lock
    killed.join(60)
    assert killed.exitcode == -signal.SIGKILL
    for proc in writers:
        proc.join(300)
        assert proc.exitcode == 0
    store = Store(store_location)
    ids = {run["id"] for run in store.list_runs(None)}
    expected = {f"w{w}-{i}" for w in range(WRITERS) for i in range(RUNS_EACH)} | {
        f"k-{i}" for i in range(KILLED_COMMITTED)}
    assert ids == expected  # every committed run, and nothing of the killed transaction
    with store.reading() as conn:
        assert conn.execute("SELECT count(*) FROM results").fetchone()[0] == 2 * len(expected)  # no half run
        assert conn.execute("SELECT count(*) FROM sample_runs").fetchone()[0] == len(expected)
        assert not conn.execute("SELECT 1 FROM results WHERE run_id NOT IN (SELECT id FROM runs)").fetchone()
    assert_aggregates_exact(store)


# ------------------------------------------------------------------------------------ config.yaml, one line
def _configure(dlrun_home: Path, store: str | None) -> None:
    config = Path(os.environ["XDG_CONFIG_HOME"]) / "dlrun" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("site: here.example\n" + (f"store: {store!r}\n" if store else ""))


def test_commands_use_the_configured_store_and_never_show_its_password(dlrun_home, postgres_url):
    _configure(dlrun_home, postgres_url)
    assert cli_json("results", "list") == []  # reading creates nothing
    assert not dlrun_home.joinpath("results.sqlite").exists()
    Store(postgres_url).add_runs([_run("pg-1", 120.0, "sys0")])
    listed = cli_json("results", "list")
    assert [run["id"] for run in listed] == ["pg-1"]
    shown = run_cli("results", "show", "pg-1", check=True)
    compared = run_cli("compare", "--workload", "resnet50", check=True)
    for proc in (shown, compared):
        assert PASSWORD not in proc.stdout + proc.stderr
    assert not dlrun_home.joinpath("results.sqlite").exists()
    assert PASSWORD not in str(Store(postgres_url).path) and PASSWORD not in repr(Store(postgres_url).path)


@pytest.mark.parametrize("url, why", [
    ("postgresql://u:s3cret-pw@db.example/", "no database name after the host"),
    ("postgresql://u:s3cret-pw@db.example:port/x", "the port is not a number"),
    ("mysql://u:s3cret-pw@db.example/x", "the scheme 'mysql' is not postgresql"),
    ("/some/file.sqlite", "not a URL"),
])
def test_a_bad_store_url_is_one_line_naming_it_with_the_password_redacted(dlrun_home, url, why):
    _configure(dlrun_home, url)
    proc = run_cli("results", "list")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and why in proc.stderr and "valid: postgresql://USER@HOST" in proc.stderr
    assert "s3cret-pw" not in proc.stderr and ("<redacted>" in proc.stderr or "s3cret" not in url)


def test_an_unreachable_server_and_a_wrong_password_are_one_line(dlrun_home, postgres_server, postgres_url):
    closed = f"postgresql://dlrun_test:{PASSWORD}@127.0.0.1:{free_port()}/nothing"
    wrong = postgres_url.replace(PASSWORD, "not-the-pw-42")
    for url, said in ((closed, "Connection refused"), (wrong, "password authentication failed")):
        _configure(dlrun_home, url)
        proc = run_cli("results", "list")
        assert proc.returncode == 1 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
        assert said in proc.stderr and "cannot reach the result store postgresql://dlrun_test:<redacted>@" in proc.stderr
        assert PASSWORD not in proc.stderr and "not-the-pw-42" not in proc.stderr
    with pytest.raises(StoreError, match="password authentication failed"):
        Store(wrong).add_runs([_run("x", 1.0, "s")])


def test_the_password_may_come_from_pgpassword(dlrun_home, postgres_url, monkeypatch):
    bare = postgres_url.replace(f":{PASSWORD}@", "@")
    _configure(dlrun_home, bare)
    Store(postgres_url).add_runs([_run("pg-2", 120.0, "sys0")])
    assert [run["id"] for run in cli_json("results", "list", env={"PGPASSWORD": PASSWORD})] == ["pg-2"]


def test_parse_store_keeps_the_url_and_redacts_it():
    url = parse_store("postgresql://alice:p%40ss-word@db.example:5433/results?sslmode=require")
    assert isinstance(url, PostgresUrl) and url.password == "p@ss-word"
    assert str(url) == "postgresql://alice:<redacted>@db.example:5433/results?sslmode=require"
    assert "p@ss-word" not in url.redact("FATAL: password p@ss-word for alice")


# ----------------------------------------------------------------------------------- schema and migrations
def _version(url: str) -> int:
    with Store(url).reading() as conn:
        return conn.execute("SELECT version FROM dlrun_schema").fetchone()[0]


def test_a_postgresql_store_keeps_its_schema_version_and_is_upgraded_in_place(postgres_url):
    store = Store(postgres_url)
    store.add_runs([_run("a", 100.0, "sys0"), _run("b", 110.0, "sys1")])
    assert _version(postgres_url) == SCHEMA_VERSION
    with store.transaction() as conn:  # the store as a dlrun of schema 5 left it: no aggregates yet
        conn.execute("DROP TABLE samples")
        conn.execute("DROP TABLE sample_runs")
        conn.execute("UPDATE dlrun_schema SET version = 5")
    assert len(store.list_runs()) == 2  # reading upgrades it first (version 6 rebuilds the aggregates)
    assert _version(postgres_url) == SCHEMA_VERSION
    assert_aggregates_exact(store)
    with store.transaction() as conn:
        conn.execute("UPDATE dlrun_schema SET version = ?", (SCHEMA_VERSION + 1,))
    with pytest.raises(Exception, match=f"schema version {SCHEMA_VERSION + 1}; this dlrun reads up to"):
        store.list_runs()


def test_a_database_of_another_program_is_left_alone(postgres_url):
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE runs (something integer)")
    with pytest.raises(StoreError, match="holds a table `runs` but no dlrun schema version"):
        Store(postgres_url).add_runs([_run("a", 100.0, "sys0")])


# ------------------------------------------------------------------------------- between the two backends
def test_a_bundle_imports_into_a_postgresql_store(dlrun_home, tmp_path, postgres_url):
    source = filled_store(tmp_path / "a")  # runs of site-a, this site is here.example
    _configure(dlrun_home, None)
    bundle = tmp_path / "a.bundle"
    dlrun_home.mkdir(parents=True, exist_ok=True)
    (dlrun_home / "results.sqlite").write_bytes(source.path.read_bytes())
    run_cli("results", "export", "--out", str(bundle), "--exporting-site", "site-a", check=True)
    _configure(dlrun_home, postgres_url)
    run_cli("results", "import", str(bundle), "--unsigned", check=True)
    moved = {run["id"] for run in cli_json("results", "list")}
    assert moved == {run["id"] for run in source.list_runs(None)} and moved
    again = run_cli("results", "import", str(bundle), "--unsigned", check=True)  # twice adds nothing
    assert len(cli_json("results", "list")) == len(moved) and "stored already" in again.stdout + again.stderr
    assert_aggregates_exact(Store(postgres_url))


def test_sqlite_errors_stay_sqlite_errors(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    store.add_runs([_run("a", 1.0, "s")])
    with pytest.raises(sqlite3.IntegrityError):
        store.add_runs([_run("a", 1.0, "s")])


def test_copy_moves_a_sites_store_to_postgresql_and_back(dlrun_home, tmp_path, postgres_url):
    """A site's own runs (this site's name) are no bundle's to import: `results copy` moves them as they are."""
    _configure(dlrun_home, None)
    dlrun_home.mkdir(parents=True, exist_ok=True)
    local = Store(dlrun_home / "results.sqlite")
    local.add_runs([_run(f"own-{i}", 100.0 + i, f"sys{i % 2}") for i in range(6)])
    before = {run["id"]: run for run in local.get_runs(Filters())}
    bundle = tmp_path / "own.bundle"
    run_cli("results", "export", "--out", str(bundle), check=True)
    _configure(dlrun_home, postgres_url)
    refused = run_cli("results", "import", str(bundle), "--unsigned")  # this site's own runs: no bundle's
    assert refused.returncode == 1 and "dlrun results copy SOURCE" in refused.stderr
    proc = run_cli("results", "copy", str(dlrun_home / "results.sqlite"), check=True)
    assert "copied 6 of 6 runs" in proc.stdout and PASSWORD not in proc.stdout + proc.stderr
    moved = {run["id"]: run for run in Store(postgres_url).get_runs(Filters())}
    assert moved == before  # every field of every run, its results, origin, site and key
    assert "6 stored already" in run_cli("results", "copy", str(dlrun_home / "results.sqlite"), check=True).stdout
    assert_aggregates_exact(Store(postgres_url))
    # and back, into a new SQLite store, from the URL (its password from the environment)
    _configure(dlrun_home, None)
    (dlrun_home / "results.sqlite").unlink()
    bare = postgres_url.replace(f":{PASSWORD}@", "@")
    proc = run_cli("results", "copy", bare, env={"PGPASSWORD": PASSWORD}, check=True)
    assert "copied 6 of 6 runs" in proc.stdout
    assert {run["id"]: run for run in Store(dlrun_home / "results.sqlite").get_runs(Filters())} == before
    refused = run_cli("results", "copy", str(dlrun_home / "results.sqlite"))
    assert refused.returncode == 2 and "is this site's store itself" in refused.stderr


def test_a_real_run_is_stored_in_postgresql_and_its_password_nowhere(dlrun_home, postgres_url):
    _configure(dlrun_home, postgres_url)
    proc = run_cli("run", "trivial", "--steps", "1", "--warmup-steps", "1", "--batch-size", "2", "--tune", "off",
                   env={"PGPASSWORD": PASSWORD})
    assert proc.returncode == 0, proc.stderr
    runs = Store(postgres_url).get_runs(Filters())
    assert [run["status"] for run in runs] == ["ok"] and runs[0]["workload"] == "trivial"
    assert not (dlrun_home / "results.sqlite").exists()
    assert PASSWORD not in proc.stdout + proc.stderr
    assert PASSWORD not in json.dumps(runs)
    for path in dlrun_home.rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), path


def test_values_read_out_of_json_are_read_on_both_backends(store_location):
    """compare --metric samples-per-joule and the energy report read a value inside a row's JSON."""
    from dlrun.report.energy import _summaries

    store = Store(store_location)
    spj = 0.12345678901234568  # all 17 digits of a double
    pairs = []
    for run_id, telemetry in (("with", {"samples_per_joule": spj}), ("no-energy", {}), ("none", None)):
        run, rows = _run(run_id, 100.0, "sys0")
        rows[0]["extra"] = {"telemetry": telemetry} if telemetry is not None else {}
        run["provenance"] = {"telemetry": {"energy_j": 5.5}} if telemetry else {}
        pairs.append((run, rows))
    store.add_runs(pairs)
    got = {run_id: float(value) for group in store.grouped_values(Filters(), compared="samples-per-joule")
           for run_id, value in zip(group["run_ids"], group["values"])}
    # SQLite's printf keeps 16 digits (an ulp off at most); PostgreSQL gives the JSON number's own text
    assert got["with"] == pytest.approx(spj, rel=1e-15) and got["none"] == float("-inf")
    assert str(got["no-energy"]) == "nan"
    summaries = _summaries(store, ["with", "none"])
    assert summaries["with"][0] == {"energy_j": 5.5} and summaries["none"][0] is None


def test_without_the_driver_a_postgresql_store_is_one_line_saying_what_to_install(monkeypatch):
    import sys

    from dlrun.errors import UsageError

    monkeypatch.setitem(sys.modules, "psycopg", None)  # as where the postgresql extra is not installed
    with pytest.raises(UsageError, match=r"needs the psycopg driver; valid: pip install 'dlrun\[postgresql\]'"):
        Store(f"postgresql://u:{PASSWORD}@127.0.0.1/x").list_runs()


def _first_writer(location: str, worker: int, start) -> None:
    start.wait()  # all eight open the brand-new database at once
    Store(location).add_runs([_run(f"w{worker}", 100.0 + worker, "sys0")])


def test_eight_first_writers_on_fresh_databases_create_the_schema_once(postgres_server):
    """Writers that waited for the lock while another created the schema once saw no schema (a stale catalog
    cache) and ran the migrations again: `column "site" of relation "runs" already exists`."""
    ctx = mp.get_context("fork")
    for _ in range(5):
        url = new_database(postgres_server)
        start = ctx.Barrier(8)
        procs = [ctx.Process(target=_first_writer, args=(url, w, start)) for w in range(8)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(120)
            assert proc.exitcode == 0
        assert len(Store(url).list_runs(None)) == 8 and _version(url) == SCHEMA_VERSION

