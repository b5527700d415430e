"""Parsers: dlrun harness output and tf_cnn_benchmarks output (single and Horovod, interleaved)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli

from dlrun.results.parse import ParseError, parse_text

DATA = Path(__file__).parent / "data"


def test_tf_cnn_single_gpu():
    res = parse_text((DATA / "tf_cnn_single.log").read_text())
    assert (res.kind, res.metric, res.value, res.unit) == ("tf_cnn_benchmarks", "throughput", 360.75, "images/sec")
    assert (res.model, res.batch_size, res.num_devices) == ("resnet50", 64, 1)


def test_tf_cnn_horovod_interleaved_reports_the_job_value_once():
    res = parse_text((DATA / "tf_cnn_horovod_2ranks.log").read_text())
    assert res.value == 1401.50  # rank 0's estimate of the job total, not a sum of both ranks
    assert res.extra["reports"] == [1398.20, 1401.50]
    assert (res.model, res.batch_size, res.num_devices) == ("resnet50_v1.5", 256, 2)


def test_dlrun_result_line():
    record = {"metric": "throughput", "value": 12.5, "unit": "images/sec", "model": "resnet18",
              "batch_size_per_rank": 4, "world_size": 2, "formula": "x"}
    text = "Step\tImg/sec\ttotal_loss\ntotal images/sec: 12.50\nDLRUN_RESULT " + json.dumps(record) + "\n"
    res = parse_text(text)
    assert (res.kind, res.value, res.model, res.batch_size, res.num_devices) == \
        ("dlrun-harness", 12.5, "resnet18", 4, 2)


def test_two_result_lines_are_an_error():
    line = "DLRUN_RESULT " + json.dumps({"value": 1.0}) + "\n"
    with pytest.raises(ParseError, match="expected one DLRUN_RESULT line, found 2"):
        parse_text(line * 2)


def test_no_result():
    with pytest.raises(ParseError, match="no result found"):
        parse_text("hello\nworld\n")


def test_parse_cli_json(dlrun_home):
    proc = run_cli("parse", str(DATA / "tf_cnn_horovod_2ranks.log"), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    for key in ("kind", "metric", "value", "unit", "model", "batch_size", "num_devices"):
        assert key in data
    assert data["value"] == 1401.5 and data["num_devices"] == 2


def test_parse_cli_no_result_exit_1(dlrun_home, tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    proc = run_cli("parse", str(empty))
    assert proc.returncode == 1 and "no result found" in proc.stderr
