"""`compare --mode history`: a run judged against its machine's baseline, the site's own last N ok runs of its
key (median and 95 % prediction interval, t on the logs, checked against `scipy.stats`). Real SQLite stores
filled through the store API; the CLI as a user runs it."""
from __future__ import annotations

import json
import math

import pytest
from compare_data import DGX2_NODE, add
from conftest import run_cli

from dlrun.errors import UsageError
from dlrun.results.compare import compare
from dlrun.results.store import Store
from dlrun.results.store.query import Filters

HISTORY = [101.0, 99.0, 100.5, 98.5, 100.0, 102.0, 99.5, 100.0, 101.5, 98.0]


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("DLRUN_SITE", "here")
    return Store(tmp_path / "results.sqlite")


def _stamp(second: int) -> str:
    return f"2026-03-01T10:{second // 60:02d}:{second % 60:02d}Z"


def _history(store, values, start=0, **fields):
    return [add(store, [value], created=_stamp(start + i), **fields)[0] for i, value in enumerate(values)]


def _prediction_interval(values):
    import numpy as np
    import scipy.stats

    logs = np.log(values)
    half = scipy.stats.t.ppf(0.975, len(values) - 1) * logs.std(ddof=1) * math.sqrt(1 + 1 / len(values))
    return float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half))


def test_a_run_20_percent_below_its_baseline_is_reported_with_the_interval(store):
    _history(store, HISTORY)
    [slow] = add(store, [80.0], created=_stamp(100))
    result = compare(store, Filters(run_ids=(slow,)), mode="history")
    [row] = result.rows
    low, high = _prediction_interval(HISTORY)
    assert (row["run_id"], row["verdict"], row["history_n"]) == (slow, "below baseline", 10)
    assert row["history_median"] == 100.0 and row["deviation_pct"] == pytest.approx(-20.0)
    assert (row["interval_low"], row["interval_high"]) == (pytest.approx(low, rel=1e-9), pytest.approx(high, rel=1e-9))
    assert row["verdict_why"] == (f"-20.0 % from the median, under the 95% prediction interval [{low:.4g}, "
                                  f"{high:.4g}] and beyond the 5 % tolerance")
    assert "prediction interval" in result.statistics["baseline"]


def test_a_run_like_its_history_is_within_and_the_newest_run_of_each_key_is_judged(store):
    _history(store, HISTORY)
    [usual] = add(store, [99.0], created=_stamp(100))
    _history(store, [50.0, 51.0, 49.0, 50.5], start=200, devices=2)  # another key: its own history
    result = compare(store, Filters(workload=("resnet50",)), mode="history")
    rows = {row["devices"]: row for row in result.rows}
    assert rows[1]["run_id"] == usual and rows[1]["verdict"] == "within baseline"
    assert rows[1]["history_runs"][0] == "%s" % rows[1]["history_runs"][0] and len(rows[1]["history_runs"]) == 10
    assert (rows[2]["verdict"], rows[2]["history_n"], rows[2]["history_median"]) == ("within baseline", 3, 50.0)


def test_the_baseline_is_the_last_n_runs_of_the_same_machine_only(store):
    _history(store, [200.0] * 5)  # old runs, then the machine got slower and stayed so
    _history(store, HISTORY, start=10)
    other_machine = {**DGX2_NODE, "gpu": "Tesla V100-SXM2-16GB"}
    _history(store, [60.0, 61.0, 59.0], start=30, machine=other_machine)  # same workload, another machine
    [run] = add(store, [80.0], created=_stamp(100))
    [row] = compare(store, Filters(run_ids=(run,)), mode="history", last=10).rows
    assert row["history_n"] == 10 and row["history_median"] == 100.0 and row["verdict"] == "below baseline"
    [wide] = compare(store, Filters(run_ids=(run,)), mode="history", last=15).rows
    assert wide["history_n"] == 15 and wide["history_median"] == 101.0


def test_no_baseline_below_three_runs_and_a_latecomer_never_counts(store):
    [first] = add(store, [100.0], created=_stamp(0))
    _history(store, [100.0, 101.0], start=1)
    [row] = compare(store, Filters(run_ids=(first,)), mode="history").rows
    assert (row["verdict"], row["history_n"]) == ("no baseline", 0)  # runs stored after it are not its history
    assert row["verdict_why"] == "0 ok run(s) of its key stored before it; a baseline needs at least 3"


def test_history_mode_refuses_what_it_cannot_do(store):
    _history(store, HISTORY)
    with pytest.raises(UsageError, match=r"bad --last 0; valid: 1 to 1000 runs"):
        compare(store, Filters(), mode="history", last=0)
    with pytest.raises(UsageError, match="--mode history compares no axis"):
        compare(store, Filters(), mode="history", by="system")


def test_cli_reports_the_run_below_its_baseline(dlrun_home):
    store = Store(dlrun_home / "results.sqlite")
    env = {"DLRUN_HOME": str(dlrun_home), "DLRUN_SITE": "here"}
    _history(store, HISTORY)
    [slow] = add(store, [80.0], created=_stamp(100))
    data = json.loads(run_cli("compare", slow, "--mode", "history", "--json", env=env, check=True).stdout)
    assert data["mode"] == "history" and data["rows"][0]["verdict"] == "below baseline"
    table = run_cli("compare", slow, "--mode", "history", env={**env, "COLUMNS": "250"}, check=True).stdout
    low, high = _prediction_interval(HISTORY)
    assert "(images/sec)" in table.splitlines()[0]
    [line] = [line for line in table.splitlines() if slow in line]
    assert [cell.strip() for cell in line.strip("│ ").split("│")][4:9] == \
        ["80.00", "100.00 (n=10)", f"[{low:.2f}, {high:.2f}]", "-20.0 %", "BELOW BASELINE"]
    bad = run_cli("compare", slow, "--mode", "history", "--tolerance", "150", env=env)
    assert bad.returncode == 2 and bad.stderr == "dlrun: error: --tolerance 150: a percentage from 0 to below 100\n"
