"""The quality verdict from what the hardware did: a GPU slowed by its power or thermal limits for more than
THROTTLED_SHARE of the timed window (the clock event reason bits as NVML defines them: nvml.h's
nvmlClocksEventReason*/nvmlClocksThrottleReason*), a collective far below the bus bandwidth of its detected
path (the published DGX A100 `nvidia-smi topo -m` in tests/data/telemetry), and a fraction of a sourced peak
above 1. The summaries are built by dlrun.telemetry.summary from sampler series, as a run stores them."""
from __future__ import annotations

from pathlib import Path

import pytest
from compare_data import record

from dlrun.probe.topology import expected_busbw, parse_topo_matrix
from dlrun.results.compare import compare
from dlrun.results.quality import BUSBW_FLOOR, THROTTLED_SHARE, point_reasons, run_quality
from dlrun.results.store.query import Filters
from dlrun.results.store import Store
from dlrun.telemetry.series import Series
from dlrun.telemetry.summary import result_fields, summarize

TOPO = Path(__file__).parent / "data" / "telemetry" / "topo" / "dgx-a100_gengwg.txt"
# nvml.h: nvmlClocksThrottleReason*
GPU_IDLE, SW_POWER_CAP, HW_SLOWDOWN, SYNC_BOOST, SW_THERMAL, HW_THERMAL = 0x1, 0x4, 0x8, 0x10, 0x20, 0x40
HARNESS_OK = {"window_s": 20.0, "steps": 20, "step_rate_spread": 0.01, "hosts": {}}


def _telemetry(masks: dict[int, list[int]]) -> dict:
    """extra.telemetry of a 20 s timed window sampled every second, GPU i reporting masks[i] in turn."""
    header = {"dlrun_telemetry": 1, "node": "dgx01", "period_s": 1.0, "rapl": {"readable": False, "why": "-"},
              "gpu": {"source": "nvml", "why": None}}
    samples = [{"t": 100.0 + s, "gpu": [{"i": i, "power_w": 400.0, "util": 100, "throttle": m[s % len(m)]}
                                       for i, m in masks.items()]} for s in range(23)]
    result = {"metric": "throughput", "value": 2500.0, "unit": "images/sec",
              "extra": {"timed_start_unix": 101.0, "wall_time_s": 20.0}}
    return result_fields(summarize([Series("dgx01", header, samples, {"end": 1, "reason": "SIGTERM"})], result))


def _judge(**extra) -> dict:
    return run_quality("ok", [{"metric": "throughput", "value": 2500.0, "extra": {"quality": HARNESS_OK, **extra}}])


def test_a_gpu_at_its_power_cap_for_half_the_window_is_degraded():
    # GPU 0: at its software power cap every other second; GPU 1: sync boost and idle only (no limit of its own)
    fields = _telemetry({0: [SW_POWER_CAP, 0], 1: [SYNC_BOOST, GPU_IDLE]})
    assert fields["gpu_slowed_device"] == "dgx01 GPU 0" and fields["gpu_max_slowed_share"] == pytest.approx(0.5)
    quality = _judge(telemetry=fields)
    assert quality["verdict"] == "degraded"
    assert quality["reasons"] == ["degraded: dgx01 GPU 0 was slowed by its power or thermal limits for 50 % of the "
                                  f"20 s timed window (more than {THROTTLED_SHARE * 100:.0f} %)"]


@pytest.mark.parametrize("mask", [HW_SLOWDOWN, SW_THERMAL, HW_THERMAL, SW_THERMAL | SW_POWER_CAP])
def test_thermal_and_hardware_slowdowns_count_once_per_second(mask):
    fields = _telemetry({0: [mask] * 4 + [0] * 16})  # 4 of 20 s
    assert fields["gpu_max_slowed_share"] == pytest.approx(0.2) and _judge(telemetry=fields)["verdict"] == "degraded"


def test_a_short_brush_with_the_cap_and_sync_boost_are_ok():
    fields = _telemetry({0: [SW_POWER_CAP] + [0] * 19, 1: [SYNC_BOOST]})  # 1 of 20 s: 5 %
    assert fields["gpu_max_slowed_share"] == pytest.approx(0.05)
    assert _judge(telemetry=fields) == {"verdict": "ok", "reasons": []}


def _busbw(value: float) -> dict:
    topo = {"gpus": {}, "nics": {}, "matrix": parse_topo_matrix(TOPO.read_text())}
    expected = expected_busbw(topo, nodes=1, gpu_name="NVIDIA A100-SXM4-40GB", device="cuda")
    expected["fraction"] = round(value / expected["value"], 4)  # as dlrun.execute.hardware records it
    # a collective records no step-rate figures: its verdict comes from the hardware alone
    return run_quality("ok", [{"metric": "busbw", "value": value, "extra": {"expected_busbw": expected}}])


def test_a_collective_far_below_its_paths_bandwidth_is_degraded_and_above_it_implausible():
    low = _busbw(60.0)
    assert low["verdict"] == "degraded" and low["reasons"][1] == (
        "degraded: the bus bandwidth is 20 % of what NVLink (A100) x 12 per GPU pair allows 300 GB/s "
        f"(below {BUSBW_FLOOR * 100:.0f} %)")
    assert _busbw(400.0)["verdict"] == "implausible" and "133 % of what NVLink" in _busbw(400.0)["reasons"][1]
    assert _busbw(230.0)["verdict"] == "unknown"  # 77 %: nothing wrong with the path; no harness figures either


def test_a_fraction_of_a_sourced_peak_above_one_is_implausible():
    assert point_reasons({"of_peak": 1.01}) == ["implausible: 101 % of the devices' nominal peak (above 100 %)"]
    assert point_reasons({"of_peak": 0.99}) == []


def test_the_store_keeps_the_verdict_and_compare_marks_the_point(tmp_path, monkeypatch):
    monkeypatch.setenv("DLRUN_SITE", "here")
    store = Store(tmp_path / "results.sqlite")
    for masks in ({0: [0]}, {0: [0]}, {0: [SW_THERMAL, 0, 0]}):
        run, rows = record(2500.0, verdict_inputs=HARNESS_OK)
        rows[0]["extra"]["telemetry"] = _telemetry(masks)
        store.add_run(run, rows)
    assert [r["verdict"] for r in store.list_runs(10)].count("degraded") == 1
    (row,) = compare(store, Filters()).rows
    assert row["quality"] == "degraded" and row["quality_reasons"] == ["1 of 3 run(s) degraded"]
