"""Benchmark 8: `dlrun run --image host-tf` (dlrun's TensorFlow 2 harness) vs a bare TensorFlow loop.

Compared: the throughput dlrun stores for `dlrun run resnet50_v1 --image host-tf` (the harness's model
`resnet50`, i.e. keras.applications.ResNet50; timed steps, warm-up excluded, read back from the result store)
against the images/sec of `bare_loop_tf.py`: the same Keras model, optimizer, loss and fixed synthetic batch in
a tf.function GradientTape loop that neither times nor waits for single steps, and (informational) Keras'
`model.fit` over the same batch. Fresh processes with the same environment and threads, alternated
dlrun/bare/fit in each round; the ratio is the median of per-round ratios.
"""
from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

from common import (BENCH_DIR, DLRUN, PYTHON, Row, alternate, bench_env, latest_result, median, run_json, spread,
                    write_result)

GOAL = 0.95
# (dlrun workload, batch, timed steps, warm-up steps): ResNet-50 (Keras' v1) fp32, as the goal names it.
CASE = ("resnet50_v1", 16, 6, 2)


def measure(threads: int, repeats: int, log, quick: bool = False) -> list[Row]:
    workload, batch, steps, warmup = CASE
    if quick:
        steps = 3
    results: list[dict] = []
    walls: dict[str, list[float]] = {"dlrun": [], "bare": [], "fit": []}
    with tempfile.TemporaryDirectory(prefix="dlrun-bench-tf-") as tmp:
        home = Path(tmp)

        def via_dlrun() -> float:
            argv = [DLRUN, "run", workload, "--image", "host-tf", "--batch-size", str(batch), "--steps",
                    str(steps), "--warmup-steps", str(warmup), "--threads", str(threads)]
            start = time.perf_counter()
            proc = subprocess.run(argv, capture_output=True, text=True, env=bench_env(threads, DLRUN_HOME=tmp))
            walls["dlrun"].append(time.perf_counter() - start)
            if proc.returncode != 0:
                raise RuntimeError(f"dlrun run {workload} --image host-tf exited {proc.returncode}: "
                                   f"{proc.stderr.strip()[-600:]}")
            _, result = latest_result(home)
            results.append(result)
            return float(result["value"])

        def bare(*extra: str):
            name = "fit" if extra else "bare"

            def once() -> float:
                data, wall = run_json([PYTHON, str(BENCH_DIR / "bare_loop_tf.py"), "--batch-size", str(batch),
                                       "--steps", str(steps), "--warmup-steps", str(warmup), "--threads",
                                       str(threads), *extra], env=bench_env(threads))
                walls[name].append(wall)
                return float(data["images_per_sec"])
            return once

        log(f"[8] TensorFlow {workload} (keras.applications.ResNet50) batch {batch} fp32, {warmup}+{steps} steps, "
            f"{threads} threads")
        variants = {"dlrun": via_dlrun, "bare": bare()}
        if not quick:
            variants["fit"] = bare("--fit")
        samples = alternate(variants, repeats, log)
    ratio = median([d / b for d, b in zip(samples["dlrun"], samples["bare"])])
    rows = [Row("8 TF harness overhead", f"{workload} (Keras ResNet50) fp32 b{batch}: dlrun host-tf/bare tape loop",
                ratio, goal=GOAL, detail=f"median of per-round ratios; dlrun {spread(samples['dlrun'])} vs bare "
                                         f"{spread(samples['bare'])} img/s")]
    if "fit" in samples:
        rows.append(Row("8 TF harness overhead", f"{workload}: dlrun host-tf / Keras model.fit",
                        median([d / f for d, f in zip(samples["dlrun"], samples["fit"])]),
                        detail=f"model.fit {spread(samples['fit'])} img/s (informational)"))
    write_result("tf_overhead", {"goal": GOAL, "threads": threads, "repeats": repeats, "workload": workload,
                                 "batch": batch, "steps": steps, "warmup_steps": warmup, "samples_img_s": samples,
                                 "process_wall_s": walls, "ratio": ratio,
                                 "dlrun_results": [r["extra"] for r in results[-1:]]})
    return rows
