"""Benchmark 1: what `dlrun run` measures and reports vs a hand-written loop of exactly the same ops.

Two paths per model, each `dlrun run` (its stored throughput: the harness's timed steps, warm-up excluded,
read back from dlrun's result store) against `bare_loop.py` over the same number of timed steps after the
same warm-up, same model definition, batch, threads, precision and allocator:

- **reference path**: the code-path knobs at their reference values, asked for (PyTorch's own ops, eagerly, in
  its default layout: `--fused-optimizer off --fused-bn-relu off --channels-last off --compile off`), the tuner
  off; the bare loop runs exactly those ops. What the harness itself costs, free of any knob's effect.
- **tuned path**: `dlrun run` as a user starts it (the tuner on: its decision made once, by the first run, and
  reused), against the bare loop given the knobs that run used (memory format, fused SGD step, fused batch
  norm + ReLU kernel), read from its stored result.

Both run as fresh processes with the same environment; rounds alternate (the order flipped every round) until
the 95 % interval of the per-round ratio decides against the goal (`alternate_until_decided`, as benchmarks 11
and 12): PASS where all of it is at or above 0.98, MISS where all of it is below, else INCONCLUSIVE. The
end-to-end wall time of each process (interpreter start, model build, warm-up, run directory and store) is
reported too, for information; `bench/startup.py` breaks dlrun's own share of it down.

The bare loop runs under the memory allocator the harness picks (tcmalloc here: the harness preloads it, and
the bare loop gets the same library through LD_PRELOAD), so that the comparison is like for like.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import (BENCH_DIR, DLRUN, PYTHON, Row, allocator_env, alternate_until_decided, bench_env,
                    harness_allocator, interval_text, latest_result, median, ratio_interval, run_json, spread,
                    verdict, write_result)

GOAL = 0.98
# (dlrun workload, harness model, batch, timed steps, warm-up steps, most rounds)
CASES = [("resnet50", "resnet50_v1.5", 16, 10, 2, 8), ("resnet18", "resnet18", 16, 10, 2, 12)]
#: The code-path knobs at their reference values (harness_contract.CODE_PATH_KNOBS), asked for.
REFERENCE = ["--fused-optimizer", "off", "--fused-bn-relu", "off", "--channels-last", "off", "--compile", "off"]
#: The knobs the bare loop can be given, as the run recorded them.
BARE_KNOBS = ("channels_last", "fused_optimizer", "fused_bn_relu")


def _dlrun_once(home: Path, workload: str, batch: int, steps: int, warmup: int, threads: int, extra: list[str],
                tune: str) -> tuple[float, float, dict]:
    env = bench_env(threads, DLRUN_HOME=str(home), DLRUN_TUNE=tune, DLRUN_TUNE_BUSY_LOAD="1e9")
    argv = [DLRUN, "run", workload, "--batch-size", str(batch), "--steps", str(steps), "--warmup-steps",
            str(warmup), "--threads", str(threads), "--precision", "fp32", *extra]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"dlrun run {workload} exited {proc.returncode}: {proc.stderr.strip()[-600:]}")
    _, result = latest_result(home)
    return float(result["value"]), wall, result


def run_knobs(result: dict) -> dict[str, str]:
    """The bare loop's knobs as a stored run recorded them ("n/a", where a knob does not apply, is off)."""
    knobs = (result.get("extra") or {}).get("knobs") or {}
    return {name: "on" if (knobs.get(name) or {}).get("value") == "on" else "off" for name in BARE_KNOBS}


def _bare_once(model: str, batch: int, steps: int, warmup: int, threads: int, knobs: dict[str, str],
               env: dict[str, str]) -> tuple[float, float]:
    flags = [arg for name in BARE_KNOBS for arg in ("--" + name.replace("_", "-"), knobs[name])]
    data, wall = run_json([PYTHON, str(BENCH_DIR / "bare_loop.py"), "--model", model, "--batch-size", str(batch),
                           "--steps", str(steps), "--warmup-steps", str(warmup), "--threads", str(threads),
                           "--precision", "fp32", *flags], env=bench_env(threads, **env))
    return float(data["images_per_sec"]), wall


def path_row(label: str, samples: dict[str, list[float]], walls: dict[str, list[float]], knobs: str,
             mismatch: str | None, quick: bool) -> Row:
    """One path's row: the geometric mean of the per-round dlrun / bare ratios and its interval's verdict."""
    interval = ratio_interval([d / b for d, b in zip(samples["dlrun"], samples["bare"])])
    status = "MISS" if mismatch else ("" if quick else verdict(interval, GOAL))
    return Row("1 harness overhead", f"{label}: dlrun / bare loop", interval["ratio"], goal=None if quick else GOAL,
               status=status, detail=f"{interval_text(interval)}; dlrun {spread(samples['dlrun'])} vs bare "
                                     f"{spread(samples['bare'])} img/s; knobs {knobs}; process wall s dlrun "
                                     f"{spread(walls['dlrun'])}, bare {spread(walls['bare'])}"
                                     + (f" (MISMATCH: {mismatch})" if mismatch else ""),
               extra={"interval": interval})


def _path(home: Path, case: tuple, threads: int, knobs: dict[str, str], extra: list[str], tune: str,
          alloc_env: dict[str, str], rounds: tuple[int, int], log) -> tuple[dict, dict, list[dict]]:
    workload, model, batch, steps, warmup, _ = case
    walls: dict[str, list[float]] = {"dlrun": [], "bare": []}
    results: list[dict] = []

    def via_dlrun() -> float:
        value, wall, result = _dlrun_once(home, workload, batch, steps, warmup, threads, extra, tune)
        walls["dlrun"].append(wall)
        results.append(result)
        return value

    def bare() -> float:
        value, wall = _bare_once(model, batch, steps, warmup, threads, knobs, alloc_env)
        walls["bare"].append(wall)
        return value

    samples = alternate_until_decided({"dlrun": via_dlrun, "bare": bare}, GOAL, rounds[0], rounds[1], log)
    return samples, walls, results


def _mismatch(results: list[dict], knobs: dict[str, str], allocator: str) -> str | None:
    off = [r for r in results if run_knobs(r) != knobs or r["extra"].get("allocator") != allocator]
    return f"{len(off)} dlrun run(s) ran other knobs or another allocator than the bare loop" if off else None


def measure(threads: int, repeats: int, log, quick: bool = False) -> list[Row]:
    alloc_name, alloc_lib = harness_allocator()
    alloc_env = allocator_env(alloc_name, alloc_lib)
    rows: list[Row] = []
    record: dict = {"goal": GOAL, "threads": threads, "cases": [],
                    "allocator": {"name": alloc_name, "library": alloc_lib}}
    for case in CASES[1:] if quick else CASES:
        workload, model, batch, steps, warmup, most = case
        rounds = (1, 1) if quick else (max(repeats, 3), most)
        with tempfile.TemporaryDirectory(prefix="dlrun-bench-") as tmp:
            home = Path(tmp)
            reference = dict.fromkeys(BARE_KNOBS, "off")
            log(f"[1] {workload} b{batch} fp32, {warmup}+{steps} steps, {threads} threads, allocator {alloc_name}: "
                f"reference path (PyTorch's own ops), {rounds[0]}-{rounds[1]} rounds")
            ref = _path(home, case, threads, reference, REFERENCE, "off", alloc_env, rounds, log)
            # the tuned path: the first run makes the decision (untimed here), the timed ones reuse it
            _, _, first = _dlrun_once(home, workload, batch, steps, warmup, threads, [], "auto")
            tuned_knobs = run_knobs(first)
            log(f"[1] {workload}: tuned path, knobs {tuned_knobs}")
            tuned = _path(home, case, threads, tuned_knobs, [], "auto", alloc_env, rounds, log)
        text = lambda k: ", ".join(f"{n} {v}" for n, v in k.items())  # noqa: E731
        rows.append(path_row(f"{workload} fp32 b{batch}, reference path", ref[0], ref[1], text(reference),
                             _mismatch(ref[2], reference, alloc_name), quick))
        rows.append(path_row(f"{workload} fp32 b{batch}, tuned path", tuned[0], tuned[1], text(tuned_knobs),
                             _mismatch(tuned[2], tuned_knobs, alloc_name), quick))
        record["cases"].append({"workload": workload, "model": model, "batch": batch, "steps": steps,
                                "warmup_steps": warmup, "reference": {"samples_img_s": ref[0], "process_wall_s":
                                                                      ref[1]},
                                "tuned": {"knobs": tuned_knobs, "samples_img_s": tuned[0],
                                          "process_wall_s": tuned[1]},
                                "dlrun_results": [r["extra"] for r in (ref[2][-1:] + tuned[2][-1:])]})
    write_result("overhead", record)
    return rows


if __name__ == "__main__":  # one benchmark alone: python bench/overhead.py [--quick]
    for row in measure(2, 3, print, quick="--quick" in sys.argv):
        print(row.judge().status, row.name, row.value, row.detail)
