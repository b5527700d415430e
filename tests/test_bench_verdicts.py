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
