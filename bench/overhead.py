"""Benchmark 1: what `dlrun run` measures and reports vs a hand-written loop with the same model and settings.

Compared: the throughput dlrun stores for the run (the harness's timed steps, warm-up excluded, read back
from dlrun's result store) against the images/sec of `bare_loop.py` over the same number of timed steps after
the same warm-up: same model definition, batch, threads, precision and memory format. Both run as fresh
processes with the same environment, alternated dlrun/bare/dlrun/bare. The end-to-end wall time of each
process (interpreter start, model build, warm-up, run directory and store) is reported too, for information.

The bare loop runs under the memory allocator the harness picks (tcmalloc here: the harness preloads it,
and the bare loop gets the same library through LD_PRELOAD), so that the comparison is like for like. For
ResNet-50 a third variant runs the bare loop under glibc's malloc as a plain script gets it, to show what
the allocator is worth (informational).
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import (BENCH_DIR, DLRUN, PYTHON, Row, allocator_env, alternate, bench_env, harness_allocator,
                    latest_result, median, run_json, spread, write_result)

GOAL = 0.98
# (dlrun workload, harness model, batch, timed steps, warm-up steps)
CASES = [("resnet50", "resnet50_v1.5", 16, 10, 2), ("resnet18", "resnet18", 16, 10, 2)]


def _dlrun_once(home: Path, workload: str, batch: int, steps: int, warmup: int, threads: int,
                precision: str) -> tuple[float, float, dict]:
    env = bench_env(threads, DLRUN_HOME=str(home))
    argv = [DLRUN, "run", workload, "--batch-size", str(batch), "--steps", str(steps),
            "--warmup-steps", str(warmup), "--threads", str(threads), "--precision", precision]
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"dlrun run {workload} exited {proc.returncode}: {proc.stderr.strip()[-600:]}")
    _, result = latest_result(home)
    return float(result["value"]), wall, result


def measure(threads: int, repeats: int, log, quick: bool = False) -> list[Row]:
    sys.path.insert(0, str(BENCH_DIR.parent / "launcher"))
    from dlrun.harness import load_harness

    harness = load_harness("pytorch", "features")
    rows: list[Row] = []
    alloc_name, alloc_lib = harness_allocator()
    record: dict = {"goal": GOAL, "threads": threads, "repeats": repeats, "cases": [],
                    "allocator": {"name": alloc_name, "library": alloc_lib}}
    precision = "fp32"
    cases = CASES[:1] if quick else CASES
    with tempfile.TemporaryDirectory(prefix="dlrun-bench-") as tmp:
        home = Path(tmp)
        for workload, model, batch, steps, warmup in cases:
            # The memory format the harness picks by default, so that the bare loop matches it.
            channels_last = harness.resolve_channels_last("auto", precision, "cpu")
            walls = {"dlrun": [], "bare": []}
            results = []

            def via_dlrun():
                value, wall, result = _dlrun_once(home, workload, batch, steps, warmup, threads, precision)
                walls["dlrun"].append(wall)
                results.append(result)
                return value

            def bare_with(name, env):
                def bare():
                    data, wall = run_json([PYTHON, str(BENCH_DIR / "bare_loop.py"), "--model", model,
                                           "--batch-size", str(batch), "--steps", str(steps),
                                           "--warmup-steps", str(warmup), "--threads", str(threads),
                                           "--precision", precision,
                                           "--channels-last", "on" if channels_last else "off"],
                                          env=bench_env(threads, **env))
                    walls.setdefault(name, []).append(wall)
                    return float(data["images_per_sec"])
                return bare

            variants = {"dlrun": via_dlrun, "bare": bare_with("bare", allocator_env(alloc_name, alloc_lib))}
            if workload == "resnet50" and not quick and alloc_name != "system":
                variants["bare_glibc"] = bare_with("bare_glibc", {})
            log(f"[1] {workload} batch {batch} {precision} channels_last={channels_last}, "
                f"{warmup}+{steps} steps, {threads} threads, allocator {alloc_name}")
            # ResNet-18 runs take seconds: two extra rounds steady its ratio, whose goal sits near 1, for ~40 s.
            rounds = repeats + 2 if workload == "resnet18" and not quick else repeats
            samples = alternate(variants, rounds, log)
            # Each round is a back-to-back pair, so the median of per-round ratios cancels slow load drift.
            ratio = median([d / b for d, b in zip(samples["dlrun"], samples["bare"])])
            mismatch = [r for r in results if bool(r["extra"].get("channels_last")) != channels_last
                        or r["extra"].get("allocator") != alloc_name]
            rows.append(Row("1 harness overhead", f"{workload} fp32 b{batch}: dlrun/bare", ratio, goal=GOAL,
                            detail=f"median of per-round ratios; dlrun {spread(samples['dlrun'])} vs bare "
                                   f"{spread(samples['bare'])} img/s; both {alloc_name}"
                                   + (" (MISMATCH: dlrun ran another allocator or memory format)" if mismatch
                                      else ""),
                            status="MISS" if mismatch else ""))
            if "bare_glibc" in samples:
                gain = median([d / g for d, g in zip(samples["dlrun"], samples["bare_glibc"])])
                rows.append(Row("1 harness overhead", f"{workload}: dlrun ({alloc_name}) / bare loop (glibc malloc)",
                                gain, detail=f"median of per-round ratios; bare loop under glibc's malloc "
                                             f"{spread(samples['bare_glibc'])} img/s (what the allocator is worth)"))
            rows.append(Row("1 harness overhead", f"{workload}: end-to-end process wall bare/dlrun",
                            median(walls["bare"]) / median(walls["dlrun"]),
                            detail=f"process wall s: dlrun {spread(walls['dlrun'])} vs bare {spread(walls['bare'])}"
                                   " (incl. start-up; informational)"))
            record["cases"].append({"workload": workload, "model": model, "batch": batch, "steps": steps,
                                    "warmup_steps": warmup, "precision": precision,
                                    "channels_last": channels_last, "samples_img_s": samples,
                                    "process_wall_s": walls, "ratio": ratio,
                                    "dlrun_results": [r["extra"] for r in results[-1:]]})
    write_result("overhead", record)
    return rows
