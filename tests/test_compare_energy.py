"""`compare --metric samples-per-joule`: energy efficiency from the telemetry stored with each run (the summary
built from the published nvidia-smi power loop in tests/data/telemetry), higher is better; runs without an
energy reading are left out, counted and named with the reason, never taken as zero."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from compare_data import record
from conftest import run_cli

from dlrun.errors import DlrunError, UsageError
from dlrun.probe import telemetry_gpu
from dlrun.results.compare import compare
from dlrun.results.store.query import Filters
from dlrun.results.store import Store
from dlrun.telemetry.series import Series
from dlrun.telemetry.summary import result_fields, summarize

LOOP = Path(__file__).parent / "data" / "telemetry" / "nvidia-smi" / "ksysguard27_csv_loop.csv"


def _published_powers() -> list[float]:
    """power.draw (W) of the published one-row-a-second nvidia-smi loop."""
    return [float(r["power.draw"]) for r in telemetry_gpu.parse_query_csv(LOOP.read_text())]


def _telemetry(rate: float, scale: float = 1.0) -> dict:
    """The result's `extra.telemetry` of a run at `rate` images/s whose GPU drew the published powers x scale,
    RAPL unreadable (as on this machine), as the summary of its series gives it."""
    powers = [p * scale for p in _published_powers()]
    header = {"dlrun_telemetry": 1, "node": "n1", "period_s": 1.0,
              "rapl": {"readable": False, "why": "no /sys/class/powercap"},
              "gpu": {"source": "nvidia-smi", "why": None}}
    samples = [{"t": 100.0 + i, "gpu": [{"i": 0, "power_w": p}]} for i, p in enumerate(powers)]
    result = {"metric": "throughput", "value": rate, "unit": "images/sec",
              "extra": {"timed_start_unix": 101.0, "wall_time_s": len(powers) - 3.0}}
    return result_fields(summarize([Series("n1", header, samples, {"end": 1, "reason": "SIGTERM"})], result))


def _add(store: Store, rate: float, telemetry: dict | None, **fields) -> str:
    run, rows = record(rate, **fields)
    if telemetry is not None:
        rows[0]["extra"]["telemetry"] = telemetry
    store.add_run(run, rows)
    return run["id"]


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("DLRUN_SITE", "here")
    return Store(tmp_path / "results.sqlite")


def _unreadable() -> dict:
    fields = _telemetry(100.0)
    return {**fields, "energy_j": None, "energy_covers": [], "energy_per_sample": None, "samples_per_joule": None,
            "mean_power_w": None}


def test_samples_per_joule_leaves_out_runs_without_energy_and_says_why(store):
    spj = [_telemetry(rate)["samples_per_joule"] for rate in (100.0, 102.0, 98.0)]
    assert all(v > 0 for v in spj)
    kept = [_add(store, rate, _telemetry(rate)) for rate in (100.0, 102.0, 98.0)]
    no_energy = _add(store, 101.0, _unreadable())
    no_telemetry = _add(store, 99.0, None)
    result = compare(store, Filters(), metric="samples-per-joule")
    (row,) = result.rows
    assert result.unit == "images/J" and row["n"] == 3 and sorted(row["runs"]) == sorted(kept)
    assert row["geomean"] == pytest.approx((spj[0] * spj[1] * spj[2]) ** (1 / 3), rel=1e-9)
    assert "achieved_gflops" not in row  # FLOP/s of peak are of throughput, not of energy
    notes = "\n".join(result.notes)
    assert "1 run(s) left out, not counted as zero: energy not readable here" in notes and no_energy in notes
    assert "1 run(s) left out, not counted as zero: no telemetry" in notes and no_telemetry in notes
    throughput = compare(store, Filters())  # the rate still counts every run
    assert throughput.rows[0]["n"] == 5 and throughput.unit == "images/sec"


def test_a_regression_in_energy_efficiency_is_named_as_one(store):
    for scale in (1.0, 1.01, 0.99):
        _add(store, 100.0, _telemetry(100.0, scale), image="old", digest="sha256:" + "a" * 64)
    for scale in (1.25, 1.26, 1.24):  # same rate, a quarter more power: fewer images per joule
        _add(store, 100.0, _telemetry(100.0, scale), image="new", digest="sha256:" + "b" * 64)
    (row,) = compare(store, Filters(), by="image", baseline="old", metric="samples-per-joule").rows
    assert row["ratio"] == pytest.approx(1 / 1.25, rel=0.02)
    assert row["verdict"].startswith("less energy-efficient by 20.")


def test_nothing_to_compare_when_no_run_has_an_energy_reading(store):
    _add(store, 100.0, _unreadable())
    _add(store, 100.0, None)
    with pytest.raises(DlrunError) as caught:
        compare(store, Filters(), metric="samples-per-joule")
    assert "energy not readable here" in str(caught.value) and "no telemetry" in str(caught.value)


def test_bad_metric_and_scaling_of_energy_are_usage_errors(store):
    _add(store, 100.0, _telemetry(100.0))
    with pytest.raises(UsageError, match="samples-per-joule"):
        compare(store, Filters(), metric="samples-per-jule")
    with pytest.raises(UsageError, match="not --mode scaling"):
        compare(store, Filters(), by="devices", metric="samples-per-joule")


def test_cli_compares_samples_per_joule(dlrun_home, monkeypatch):
    monkeypatch.setenv("DLRUN_SITE", "here")
    store = Store(dlrun_home / "results.sqlite")
    for rate in (100.0, 102.0, 98.0):
        _add(store, rate, _telemetry(rate))
    _add(store, 100.0, _unreadable())
    env = {"DLRUN_HOME": str(dlrun_home), "DLRUN_SITE": "here"}
    proc = run_cli("compare", "--metric", "samples-per-joule", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "(images/J)" in proc.stdout and "energy not readable here" in proc.stdout
    data = json.loads(run_cli("compare", "--metric", "samples-per-joule", "--json", env=env).stdout)
    assert data["unit"] == "images/J" and data["rows"][0]["n"] == 3
    bad = run_cli("compare", "--metric", "joules", env=env)
    assert bad.returncode == 2 and "joules" in bad.stderr and "samples-per-joule" in bad.stderr
