"""One check of every stored field, whatever the run's origin (issue 36, breaks 8 and 13).

A bundle whose run says `created_at: "not-a-date"` was imported, sorted as the newest run and matched every
`--since` (times are compared as text). A log whose `total images/sec` is `-0` was stored as an ok run with
value -0.0. Now the store checks every record it is given (`dlrun.results.store.fields`), the bundle reader
the same way line by line, and a result's own figure must be above zero: the attacks are made for real (a
real exported bundle edited, real published logs edited, a real run) and each is refused in one line or
stored as the failed run it is.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
from bundle_data import LOGS, filled_store, members, rebuild
from conftest import cli_json, run_cli

from dlrun.results.exchange.export import export_bundle
from dlrun.results.parsers import ParseError, parse_text
from dlrun.results.store import Store
from dlrun.results.store.fields import StoredFieldError, check_fields
from dlrun.results.store.query import Filters

TF_LOG = LOGS / "tf_cnn_benchmarks" / "tfbenchmarks_pr63_1gpu_2017.log"


def _bundle(tmp_path: Path) -> Path:
    out = tmp_path / "good.bundle"
    export_bundle(filled_store(tmp_path / "a"), Filters(), out, site="site-a", dlrun_version="0.1.0", with_logs=False)
    return out


def _edited(good: Path, out: Path, edit) -> Path:
    """`good` with each runs.jsonl record passed through `edit`, the manifest's hash and size made to match
    (as a forger would; unsigned)."""
    def change(listed):
        runs = b"".join(json.dumps(edit(json.loads(line))).encode() + b"\n"
                        for line in dict((i.name, d) for i, d in listed)["runs.jsonl"].splitlines())
        manifest = json.loads(listed[0][1])
        manifest["files"]["runs.jsonl"] = {"sha256": hashlib.sha256(runs).hexdigest(), "size": len(runs)}
        edited = []
        for info, data in listed:
            if info.name == "manifest.json":
                data = json.dumps(manifest).encode()
            elif info.name == "runs.jsonl":
                data = runs
            if info.name != "manifest.json.sig":
                edited.append((info, data))
        return edited
    return rebuild(good, out, change)


BAD_TIMES = [
    ({"created_at": "not-a-date"}, "created_at 'not-a-date' is not a UTC time"),
    ({"created_at": "2026-13-01T00:00:00Z"}, "is not a UTC time"),
    ({"created_at": "2026-01-01 00:00:00"}, "is not a UTC time"),
    ({"created_at": "9999-12-31T23:59:59Z"}, "more than a day ahead"),
    ({"finished_at": "2000-01-01T00:00:00Z"}, "finished_at 2000-01-01T00:00:00Z is before created_at"),
    ({"finished_at": "2026-11-23T25:00:00Z"}, "finished_at '2026-11-23T25:00:00Z' is not a UTC time"),
]


@pytest.mark.parametrize("change,message", BAD_TIMES, ids=[m for _, m in BAD_TIMES])
def test_a_bundle_with_a_bad_time_is_refused_in_one_line_and_adds_nothing(dlrun_home, tmp_path, change, message):
    bad = _edited(_bundle(tmp_path), tmp_path / "bad.bundle", lambda record: {**record, **change})
    proc = run_cli("results", "import", str(bad), "--unsigned")
    assert proc.returncode != 0 and proc.stderr.count("\n") == 1, proc.stderr
    assert "runs.jsonl line 1" in proc.stderr and message in proc.stderr, proc.stderr
    assert cli_json("results", "list") == [] and cli_json("results", "list", "--since", "2026-01-01") == []


def test_a_bundle_with_an_ok_run_of_zero_throughput_is_refused(dlrun_home, tmp_path):
    def zero(record):
        if record["status"] == "ok":
            record["results"][0]["value"] = -0.0
        return record
    bad = _edited(_bundle(tmp_path), tmp_path / "zero.bundle", zero)
    proc = run_cli("results", "import", str(bad), "--unsigned")
    assert proc.returncode != 0 and "measured nothing (zero or -0)" in proc.stderr and proc.stderr.count("\n") == 1
    assert cli_json("results", "list") == []


def test_the_unedited_bundle_imports(dlrun_home, tmp_path):
    good = _edited(_bundle(tmp_path), tmp_path / "same.bundle", lambda record: record)
    assert run_cli("results", "import", str(good), "--unsigned").returncode == 0
    assert len(cli_json("results", "list")) == 3


def test_every_writer_goes_through_the_check(store_location):
    store = Store(store_location)
    record = {"id": "r1", "created_at": "not-a-date", "status": "ok", "plan": {}, "provenance": {}}
    with pytest.raises(StoredFieldError, match=r"^run 'r1': created_at 'not-a-date' is not a UTC time"):
        store.add_run(record, [{"metric": "throughput", "value": 1.0, "unit": "images/sec"}])
    for bad, message in ((dict(status="running"), "status 'running' is not one of"),
                         (dict(nodes=0), "nodes 0 is not a count"), (dict(world_size=True), "world_size True"),
                         (dict(system="s" * 2000), "system 'sss"), (dict(origin="x"), "origin 'x'")):
        with pytest.raises(StoredFieldError, match=message):
            store.add_run({**record, "created_at": "2026-01-01T00:00:00Z", **bad}, [])
    with pytest.raises(StoredFieldError, match="value -0.0 of an ok run measured nothing"):
        store.add_run({**record, "created_at": "2026-01-01T00:00:00Z"},
                      [{"metric": "throughput", "value": -0.0, "unit": "images/sec"}])
    store.add_run({**record, "id": "r2", "created_at": "2026-01-01T00:00:00Z", "status": "failed"},
                  [{"metric": "throughput", "value": 0.0, "unit": "images/sec"}])  # a failed run may say 0
    assert [r["id"] for r in store.list_runs()] == ["r2"]
    with store.reading() as conn:
        assert not conn.execute("SELECT 1 FROM runs WHERE id = 'r1'").fetchone()


def test_check_fields_accepts_what_dlrun_writes():
    check_fields({"id": "x", "created_at": "2026-11-23T11:44:54Z", "finished_at": "2026-11-23T11:44:54Z",
                  "status": "lost", "nodes": 2, "origin": "bundle"}, [])


def _negative_zero_log(tmp_path: Path) -> Path:
    log = tmp_path / "minus-zero.log"  # the real published log, its total replaced by -0
    text = TF_LOG.read_text()
    assert "total images/sec: 138.95" in text
    log.write_text(text.replace("total images/sec: 138.95", "total images/sec: -0"))
    return log


@pytest.mark.parametrize("figure", ["-0", "0", "0.0", "-0.000", "+0"])
def test_a_zero_figure_is_no_result(tmp_path, figure):
    with pytest.raises(ParseError, match="a zero figure measures nothing"):
        parse_text(TF_LOG.read_text().replace("total images/sec: 138.95", f"total images/sec: {figure}"))


def test_a_log_with_minus_zero_is_parsed_and_imported_as_no_result(dlrun_home, tmp_path):
    log = _negative_zero_log(tmp_path)
    proc = run_cli("parse", str(log))
    assert proc.returncode == 1 and "a zero figure measures nothing" in proc.stderr and proc.stderr.count("\n") == 1
    proc = run_cli("results", "import-log", str(log), "--system", "sys-a")
    assert proc.returncode != 0 and "a zero figure measures nothing" in proc.stderr
    assert [r for r in cli_json("results", "list") if r["status"] == "ok"] == []


def test_a_run_whose_log_says_minus_zero_is_stored_failed(dlrun_home, tmp_path):
    site = tmp_path / "site" / "workloads"
    site.mkdir(parents=True)
    log = _negative_zero_log(tmp_path)
    (site / "zero.yaml").write_text(json.dumps([{
        "name": "zero", "kind": "command", "description": "prints a real log whose total is -0",
        "result": {"format": "tf_cnn_benchmarks"}, "command": f"cat {json.dumps(str(log))}"}]))
    env = {"DLRUN_PATH": str(tmp_path / "site")}
    proc = run_cli("run", "zero", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [run] = cli_json("results", "list", env=env)
    assert (run["status"], run["value"]) == ("failed", None)
    shown = cli_json("results", "show", run["id"], env=env)
    assert "a zero figure measures nothing" in shown["provenance"]["reason"] and shown["results"] == []
