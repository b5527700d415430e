"""Benchmark 10 (P6): training from real data vs synthetic data, the PyTorch harness, same model and settings.

Three variants of the same harness run, alternated per round (synthetic, JPEG, TFRecord; the order flips
every round): ResNet-50 v1.5 fp32 training on synthetic data (one fixed batch on the device), on a JPEG
ImageFolder tree and on TFRecord shards, both written by `dlrun data synth` (256x256 JPEGs, quality 90,
about 12 KB each: small images near the model's 224x224 input, so decoding costs what it costs for
ImageNet images that were resized for training), decoded with `--data-workers 2`. Goal: each real-data
throughput >= 0.95x the synthetic one.

Two measurements, each with a 95 % interval on the ratio (log scale, t over the rounds):
* wall clock: the harness's own images/sec, per round real / synthetic. Right on a quiet machine; on a
  shared one the neighbours decide it.
* CPU seconds: what an image costs the CPUs, training process and decoding workers together (the harness's
  CPU time and that of every child it reaped), taken as the difference between a run of LONG and one of
  SHORT timed steps, so that start-up and warm-up cancel. On a node whose cores all train (a CPU node:
  threads = cores), the throughput ratio is synthetic CPU per image / real CPU per image, and other
  processes on the machine change CPU time far less than wall time.
On a 2-core machine the two decoding workers take CPU time from the two training threads: the ratio is the
price of decoding on the cores that train (on a GPU node the workers have cores of their own).
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from common import (HARNESS, PYTHON, Row, alternate, bench_env, cpu_seconds, interval_text, median, ratio_interval,
                    run_json, spread, verdict, write_result)

GOAL = 0.95
MODEL, BATCH, STEPS, WARMUP, WORKERS = "resnet50_v1.5", 8, 8, 2, 2
SHORT, LONG = 1, 5  # timed steps of the CPU-second method's two runs
IMAGES, SIZE = 160, 256  # more than warm-up + timed steps + the workers' prefetch take


def _synth(root: Path, fmt: str, threads: int) -> Path:
    out = root / fmt
    subprocess.run([PYTHON, "-m", "dlrun.cli", "data", "synth", "--format", fmt, "--images", str(IMAGES),
                    "--classes", "10", "--size", str(SIZE), "--shards", "8", str(out)], check=True,
                   capture_output=True, env=bench_env(threads))
    return out


def _argv(threads: int, steps: int, data: Path | None) -> list[str]:
    argv = [PYTHON, str(HARNESS), "--model", MODEL, "--batch-size", str(BATCH), "--steps", str(steps),
            "--warmup-steps", str(WARMUP), "--threads", str(threads), "--precision", "fp32"]
    return argv + (["--data-dir", str(data), "--data-workers", str(WORKERS)] if data is not None else [])


def _cpu_per_image(threads: int, data: Path | None, record: list[dict]) -> float:
    """CPU seconds per image of the timed steps: (CPU of LONG steps - CPU of SHORT steps) / their images.
    OpenMP threads wait passively (OMP_WAIT_POLICY=PASSIVE): a thread spinning at a barrier for a peer the loaded
    machine descheduled is charged CPU time that is no work, which inflated the 2026-11-26 figures."""
    spent = {}
    for steps in (SHORT, LONG):
        cpu, out, wall = cpu_seconds(_argv(threads, steps, data), env=bench_env(threads, OMP_WAIT_POLICY="PASSIVE"))
        spent[steps] = cpu
        record.append({"steps": steps, "cpu_s": cpu, "wall_s": wall, "data": str(data) if data else None})
    return (spent[LONG] - spent[SHORT]) / ((LONG - SHORT) * BATCH)


def _rows(method: str, samples: dict[str, list[float]], results: dict[str, list[dict]], invert: bool) -> list[Row]:
    """One row per format: its interval, verdict and numbers. `invert`: samples are costs (CPU s per image)."""
    rows = []
    for fmt in ("jpeg", "tfrecord"):
        ratios = [(s / r if invert else r / s) for r, s in zip(samples[fmt], samples["synthetic"])]
        interval = ratio_interval(ratios)
        unit = "CPU s/image" if invert else "img/s"
        wrong = method == "wall" and any(r.get("data_source") != fmt or not r.get("images_decoded")
                                         for r in results.get(fmt, []))
        rows.append(Row("10 real data (P6)", f"resnet50 fp32 b{BATCH}: {fmt} ({WORKERS} workers)/synthetic, {method}",
                        interval["ratio"], goal=GOAL,
                        status="FAIL" if wrong else verdict(interval, GOAL),
                        detail=f"{interval_text(interval)}; per-round ratios {', '.join(f'{x:.3f}' for x in ratios)}; "
                               f"{fmt} {spread(samples[fmt])} vs synthetic {spread(samples['synthetic'])} {unit}"
                               + (" (WRONG: did not read the dataset)" if wrong else ""),
                        extra={"interval": interval, "ratios": ratios}))
    return rows


def measure(threads: int, repeats: int, log, quick: bool = False, methods: tuple[str, ...] = ("wall", "cpu")
            ) -> list[Row]:
    steps = 4 if quick else STEPS
    rounds = max(repeats, 3) if not quick else 1
    results: dict[str, list[dict]] = {}
    cpu_runs: list[dict] = []

    def wall_variant(name: str, data: Path | None):
        def once() -> float:
            result, _ = run_json(_argv(threads, steps, data), env=bench_env(threads), marker="DLRUN_RESULT ")
            results.setdefault(name, []).append(result)
            return float(result["value"])
        return once

    def cpu_variant(data: Path | None):
        return lambda: _cpu_per_image(threads, data, cpu_runs)

    rows: list[Row] = []
    record = {"goal": GOAL, "model": MODEL, "batch": BATCH, "steps": steps, "warmup_steps": WARMUP,
              "workers": WORKERS, "images": IMAGES, "size": SIZE, "threads": threads, "cpu_steps": [SHORT, LONG]}
    with tempfile.TemporaryDirectory(prefix="dlrun-bench-data-") as tmp:
        data = {"synthetic": None, "jpeg": _synth(Path(tmp), "jpeg", threads),
                "tfrecord": _synth(Path(tmp), "tfrecord", threads)}
        if "wall" in methods:
            log(f"[10] {MODEL} fp32 batch {BATCH}, {WARMUP}+{steps} steps, {threads} threads; real data: {IMAGES} "
                f"images of {SIZE}x{SIZE}, {WORKERS} data workers; wall clock, {rounds} rounds")
            samples = alternate({n: wall_variant(n, d) for n, d in data.items()}, rounds, log)
            record["samples_img_s"] = samples
            rows += _rows("wall", samples, results, invert=False)
        if "cpu" in methods:
            log(f"[10] the same in CPU seconds per image ({LONG} - {SHORT} timed steps), {rounds} rounds")
            costs = alternate({n: cpu_variant(d) for n, d in data.items()}, rounds, log)
            record["cpu_s_per_image"] = costs
            record["cpu_runs"] = cpu_runs
            rows += _rows("CPU seconds", costs, results, invert=True)
    record["results"] = {name: [{k: r.get(k) for k in ("value", "data_source", "images_decoded", "data_images",
                                                       "channels_last", "allocator")} for r in rs]
                         for name, rs in results.items()}
    record["rows"] = [r.to_dict() for r in rows]
    write_result("realdata", record)
    return rows


if __name__ == "__main__":
    import argparse

    from rich.console import Console

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--method", action="append", choices=("wall", "cpu"))
    args = p.parse_args()
    console = Console(stderr=True, highlight=False)
    for row in measure(args.threads, args.rounds, lambda line: console.print(line, markup=False),
                       methods=tuple(args.method or ("wall", "cpu"))):
        print(row.judge().name, row.status, row.detail, flush=True)
    sys.exit(0)
