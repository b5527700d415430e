"""The result store defends itself: a damaged or foreign results.sqlite is one line naming it and what to do
(exit 2) for every command that reads or writes the store, and the file is left as it was; a store path that
is a symbolic link is refused, so nothing outside DLRUN_HOME is chmodded or created; `dlrun results delete`
undoes an import, asking first. Before, 32 of 70 damaged-store variant x command runs ended in a 46-77-line
traceback, and a symlinked store had its target's mode changed to 0600 (or the target created)."""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path

import pytest
from bundle_data import LOGS, filled_store
from conftest import run_cli

from dlrun.results.exchange.export import export_bundle
from dlrun.results.store.query import Filters
from dlrun.results.store import Store

LOG = LOGS / "horovod" / "issue712_pytorch_synthetic_4gpu.log"


def _good_store(path: Path) -> None:
    Store(path).add_run({"id": "r1", "created_at": "2026-01-01T00:00:00Z", "status": "ok", "workload": "w",
                         "plan": {}, "provenance": {}}, [{"metric": "throughput", "value": 1.0, "unit": "x"}])


def _truncated(path: Path) -> None:
    _good_store(path)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2 + 100])
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _header_only(path: Path) -> None:
    path.write_bytes(b"SQLite format 3\x00" + bytes(84))


def _foreign(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE songs (title TEXT, artist TEXT)")
        conn.execute("INSERT INTO songs VALUES ('a', 'b')")


def _wrong_schema(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, colour TEXT)")
        conn.execute("CREATE TABLE results (run_id TEXT, metric TEXT)")
        conn.execute("PRAGMA user_version = 2")


DAMAGE = {
    "random-bytes": lambda path: path.write_bytes(hashlib.sha512(b"not a store").digest() * 64),
    "truncated": _truncated,
    "header-only": _header_only,
    "another-sqlite-file": _foreign,
    "wrong-schema": _wrong_schema,
    "text-file": lambda path: path.write_text("results, as I remember them\n"),
}
COMMANDS = [
    ["results", "list"], ["results", "list", "--json"], ["results", "show", "r1"], ["compare"],
    ["results", "export", "--out", "OUT/x.csv"], ["results", "import-log", str(LOG), "--system", "s1"],
    ["results", "delete", "--site", "x", "--yes"], ["report", "--out", "OUT/report"],
    ["run", "trivial", "--steps", "1", "--warmup-steps", "1", "--batch-size", "2"],
    ["measure", "matmul", "--size", "64"],
]


#: Every command for two kinds of damage, the commands that only read for the others (each is a process).
EVERY = ("random-bytes", "wrong-schema")


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_store_is_one_line_for_every_command(dlrun_home, tmp_path, damage):
    dlrun_home.mkdir(parents=True)
    store = dlrun_home / "results.sqlite"
    DAMAGE[damage](store)
    before = store.read_bytes()
    for command in COMMANDS if damage in EVERY else COMMANDS[:4]:
        proc = run_cli(*[arg.replace("OUT", str(tmp_path)) for arg in command])
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr[-3000:])
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"dlrun: error: the result store '{store}' ")
        assert "move it aside (mv results.sqlite results.sqlite.bad) to start a new store" in proc.stderr
    assert store.read_bytes() == before  # left as it was
    assert not list((dlrun_home / "runs").glob("*")) if (dlrun_home / "runs").exists() else True


def test_a_store_reached_through_a_symlink_is_refused_and_its_target_left_alone(dlrun_home, tmp_path):
    dlrun_home.mkdir(parents=True)
    target = tmp_path / "system-file"
    target.write_text("root's\n")
    target.chmod(0o644)
    (dlrun_home / "results.sqlite").symlink_to(target)
    missing = tmp_path / "elsewhere" / "made-by-dlrun"
    for link_to in (target, missing):
        (dlrun_home / "results.sqlite").unlink()
        (dlrun_home / "results.sqlite").symlink_to(link_to)
        for command in (["results", "list"], ["results", "import-log", str(LOG), "--system", "s1"]):
            proc = run_cli(*command)
            assert (proc.returncode, proc.stderr) == (2, f"dlrun: error: the result store '{dlrun_home / 'results.sqlite'}' "
                                                         "is a symbolic link; dlrun opens only a store file it created: put "
                                                         "the store itself there, or set DLRUN_HOME to its folder\n")
    assert target.stat().st_mode & 0o777 == 0o644 and target.read_text() == "root's\n"
    assert not missing.exists() and not missing.parent.exists()
    # SQLite's companion files too: a -wal link would have SQLite write through it
    (dlrun_home / "results.sqlite").unlink()
    _good_store(dlrun_home / "results.sqlite")
    (dlrun_home / "results.sqlite-journal").symlink_to(target)
    proc = run_cli("results", "list")
    assert proc.returncode == 2 and "results.sqlite-journal' is a symbolic link" in proc.stderr


def test_delete_undoes_an_import_after_a_yes(dlrun_home, tmp_path):
    bundle = tmp_path / "a.bundle"
    export_bundle(filled_store(tmp_path / "a"), Filters(), bundle, site="site-a", dlrun_version="0", with_logs=True)
    env = {"DLRUN_SITE": "site-b"}
    assert run_cli("results", "import", str(bundle), "--unsigned", env=env).returncode == 0
    other_log = LOGS / "horovod" / "issue2686_horovodrun_gloo_1gpu.log"  # not among the bundle's runs
    assert run_cli("results", "import-log", str(other_log), "--system", "mine", env=env).returncode == 0
    runs = json.loads(run_cli("results", "list", "--json", env=env).stdout)
    imported = [run for run in runs if run["site"] == "site-a"]
    assert len(imported) == 3 and len(runs) == 4
    outside = tmp_path / "not-ours" / imported[0]["id"]  # a run directory that is not dlrun's to remove
    outside.mkdir(parents=True)

    proc = run_cli("results", "delete", "--site", "site-a", env=env)  # no terminal to answer in
    assert (proc.returncode, proc.stderr) == (2, "dlrun: error: deleting 3 stored runs needs a yes: answer in a "
                                                 "terminal, or give --yes\n")
    proc = run_cli("results", "delete", env=env)
    assert proc.returncode == 2 and "name the runs to delete" in proc.stderr
    assert len(json.loads(run_cli("results", "list", "--json", env=env).stdout)) == 4

    proc = run_cli("results", "delete", "--site", "site-a", "--yes", env=env)
    assert (proc.returncode, proc.stdout) == (0, "deleted 3 runs and 1 run directory\n"), proc.stderr
    [left] = json.loads(run_cli("results", "list", "--json", env=env).stdout)
    assert left["system"] == "mine"
    assert list((dlrun_home / "imported").iterdir()) == [] and outside.is_dir()
    again = run_cli("results", "import", str(bundle), "--unsigned", env=env)  # and it can be imported again
    assert again.returncode == 0 and again.stdout.startswith("imported 3 of 3 runs"), again.stderr
    proc = run_cli("results", "delete", left["id"][:12], "--yes", env=env)
    assert proc.stdout == "deleted 1 run and 0 run directories\n"


def test_delete_never_leaves_the_dlrun_home(dlrun_home, tmp_path):
    from dlrun.results.store.delete import delete_runs

    store = Store(dlrun_home / "results.sqlite")
    elsewhere = tmp_path / "data" / "run-x"
    elsewhere.mkdir(parents=True)
    link = dlrun_home / "runs" / "run-y"
    link.parent.mkdir(parents=True)
    link.symlink_to(elsewhere)
    own = dlrun_home / "runs" / "run-z"
    own.mkdir()
    runs = [{"id": "run-x", "run_dir": str(elsewhere)}, {"id": "run-y", "run_dir": str(link)},
            {"id": "run-z", "run_dir": str(own)}, {"id": "run-w", "run_dir": str(own)}]
    for run in runs:
        store.add_run({**run, "created_at": "2026-01-01T00:00:00Z", "status": "ok", "plan": {}, "provenance": {}},
                      [])
    done = delete_runs(store, runs, dlrun_home)
    assert sorted(done.runs) == ["run-w", "run-x", "run-y", "run-z"] and done.directories == [own]
    assert elsewhere.is_dir() and link.is_symlink() and not own.exists() and store.list_runs() == []
    assert os.listdir(tmp_path / "data") == ["run-x"]
