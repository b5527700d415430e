"""The benchmarks' verdicts: rounds go on until a ratio's interval decides, and an amp row never calls a goal
missed that the processor's own bf16 / fp32 matrix products cannot reach. Pure logic on given numbers (no
timing); the bench modules run in a separate process, as in test_bench_paths."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"

SCENARIOS = '''
import json, sys
sys.path.insert(0, sys.argv[1])
from common import alternate_until_decided
from efficiency import amp_rows

def rounds(top, bottom, least, most):
    calls, values = [], {"a": iter(top), "b": iter(bottom)}
    def variant(name):
        def fn():
            calls.append(name)
            return next(values[name])
        return fn
    got = alternate_until_decided({"a": variant("a"), "b": variant("b")}, 0.98, least, most, lambda line: None)
    return {"n": len(got["a"]), "calls": "".join(calls)}

ceiling = {"bf16_native": True, "bf16_mm_gflops": 360.0, "fp32_ceiling_gflops": 200.0}
samples = {"amp": [17.0, 17.2, 17.4], "fp32": [10.0, 10.0, 10.0]}
def rows(goal, no_amp=None):
    return [[r.name, r.value, r.status, r.detail] for r in amp_rows("2", "ResNet-50", samples, [ceiling] * 3, goal,
                                                                    no_amp, "img/s")]
print(json.dumps({
    "equal": rounds([5.0] * 20, [5.0] * 20, 3, 20),
    "slower": rounds([4.0] * 20, [5.0] * 20, 3, 20),
    "noisy": rounds([5.5, 4.5] * 10, [5.0] * 20, 3, 8),
    "amp_beyond": rows(2.0), "amp_reachable": rows(1.5), "amp_none": rows(2.0, "not measured: no native bf16"),
}))
'''


def _scenarios() -> dict:
    proc = subprocess.run([sys.executable, "-c", SCENARIOS, str(BENCH)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_rounds_stop_once_the_interval_decides_and_the_order_flips_every_round():
    got = _scenarios()
    assert got["equal"] == {"n": 3, "calls": "abbaab"}  # PASS as soon as `least` rounds allow
    assert got["slower"] == {"n": 3, "calls": "abbaab"}  # MISS (0.8x, no spread) decided as early
    assert got["noisy"]["n"] == 8  # +-10 % a round around 1.0: never decided against 0.98, so every round runs


def test_an_amp_goal_above_the_processors_bf16_over_fp32_products_is_not_called_a_miss():
    got = _scenarios()
    (name, value, status, detail), (ratio_name, share, ratio_status, _) = got["amp_beyond"]
    assert status == "N/A" and abs(value - 1.72) < 1e-9  # the median of 1.70, 1.72, 1.74
    assert "not judged" in detail and "1.80x" in detail and "img/s" in detail
    assert ratio_status == "" and abs(share - 1.72 / 1.8) < 1e-9
    (_, value, status, detail), _ = got["amp_reachable"]
    assert status == "" and "not judged" not in detail  # judged against its goal as before: 1.72 >= 1.5
    [(_, value, status, detail)] = got["amp_none"]
    assert value is None and status == "N/A" and detail == "not measured: no native bf16"


OVERHEAD = '''
import json, sys
sys.path.insert(0, sys.argv[1])
from overhead import path_row, run_knobs
from startup import _rows

def row(dlrun, bare, mismatch=None, quick=False):
    r = path_row("resnet18 fp32 b16, reference path", {"dlrun": dlrun, "bare": bare},
                 {"dlrun": [12.0] * len(dlrun), "bare": [10.0] * len(bare)}, "channels_last off", mismatch, quick)
    r.judge()
    return [r.value, r.status, r.detail]

phases = {"interpreter_s": 0.05, "imports_s": 0.3, "exit_s": 9.0,
          "phases": {"catalog": [[0.4, 0.2]], "job": [[1.0, 7.0]], "record and store": [[8.1, 0.1]]}}
record = {"load_before": ["0.1", "0.1", "0.1"], "load_after": ["1.0", "0.5", "0.2"],
          "processes": {"dlrun": [{"phases": phases, "cpu_s": 8.0}] * 3}}
samples = {"dlrun": [0.8, 0.9, 0.85], "harness": [3.1, 3.0, 3.2], "bare": [2.9, 2.8, 3.0]}
start = [[r.name, r.value, r.judge().status, r.detail] for r in _rows(record, samples)]
print(json.dumps({
    "level": row([28.0, 28.2, 27.9, 28.1], [28.1, 28.0, 28.0, 28.2]),
    "slower": row([26.0, 26.1, 25.9], [28.0, 28.1, 27.9]),
    "noisy": row([30.0, 26.0, 29.0], [27.0, 28.5, 27.5]),
    "mismatch": row([28.0, 28.2, 27.9], [28.1, 28.0, 28.0], mismatch="1 dlrun run(s) ran other knobs"),
    "quick": row([28.0], [28.0], quick=True),
    "knobs": run_knobs({"extra": {"knobs": {"channels_last": {"value": "on"}, "fused_optimizer": {"value": "off"},
                                            "fused_bn_relu": {"value": "n/a"}}}}),
    "start": start,
}))
'''


def _overhead() -> dict:
    proc = subprocess.run([sys.executable, "-c", OVERHEAD, str(BENCH)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_benchmark_1s_paths_are_judged_by_the_interval_of_their_per_round_ratios():
    got = _overhead()
    value, status, detail = got["level"]
    assert status == "PASS" and abs(value - 1.0) < 0.01 and "95 % CI" in detail  # all of it at or above 0.98
    assert got["slower"][1] == "MISS"  # 0.93x, all of the interval below 0.98
    assert got["noisy"][1] == "INCONCLUSIVE"  # +-10 % rounds: the interval straddles the goal
    value, status, detail = got["mismatch"]
    assert status == "MISS" and "MISMATCH" in detail  # a run on other knobs than the bare loop's never passes
    assert got["quick"][1] == "INFO"  # one round of a smoke test: no interval, no verdict
    # the bare loop is given what the run recorded; a knob that does not apply (n/a) is off
    assert got["knobs"] == {"channels_last": "on", "fused_optimizer": "off", "fused_bn_relu": "off"}


def test_the_start_up_row_holds_dlruns_own_seconds_to_one_and_names_each_phase():
    (own, value, status, detail), (extra, delta, info, extra_detail) = _overhead()["start"]
    assert abs(value - 0.85) < 1e-9 and status == "PASS"  # the median of 0.8, 0.9, 0.85 s, goal <= 1 s
    assert "catalog 0.200" in detail and "record and store 0.100" in detail and "job" not in detail.split(";")[1]
    assert "load average 0.1 0.1 0.1 -> 1.0 0.5 0.2" in detail
    assert abs(delta - 0.2) < 1e-9 and info == "INFO"  # harness - bare time to first step, per round
