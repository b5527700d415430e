"""Benchmark 10: training from real data vs synthetic data, the PyTorch harness, same model and settings.

Three variants of the same harness run, alternated per round (synthetic, JPEG, TFRecord; the order flips
every round): ResNet-50 v1.5 fp32 training on synthetic data (one fixed batch on the device), on a JPEG
ImageFolder tree and on TFRecord shards, both written by `dlrun data synth` (256x256 JPEGs, quality 90,
about 12 KB each: small images near the model's 224x224 input, so decoding costs what it costs for
ImageNet images that were resized for training), decoded with `--data-workers 2`. Goal: each real-data
throughput >= 0.95x the synthetic one, as the median of per-round ratios.

On a 2-core machine the two decoding workers take CPU time from the two training threads: the ratio is
the price of decoding on the cores that train (on a GPU node the workers have cores of their own).
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from common import HARNESS, PYTHON, Row, alternate, bench_env, median, run_json, spread, write_result

GOAL = 0.95
MODEL, BATCH, STEPS, WARMUP, WORKERS = "resnet50_v1.5", 8, 8, 2, 2
IMAGES, SIZE = 160, 256  # more than warm-up + timed steps + the workers' prefetch take


def _synth(root: Path, fmt: str, threads: int) -> Path:
    out = root / fmt
    subprocess.run([PYTHON, "-m", "dlrun.cli", "data", "synth", "--format", fmt, "--images", str(IMAGES),
                    "--classes", "10", "--size", str(SIZE), "--shards", "8", str(out)], check=True,
                   capture_output=True, env=bench_env(threads))
    return out


def measure(threads: int, repeats: int, log, quick: bool = False) -> list[Row]:
    steps = 4 if quick else STEPS
    results: dict[str, list[dict]] = {}

    def variant(name: str, data: Path | None):
        def once() -> float:
            argv = [PYTHON, str(HARNESS), "--model", MODEL, "--batch-size", str(BATCH), "--steps", str(steps),
                    "--warmup-steps", str(WARMUP), "--threads", str(threads), "--precision", "fp32"]
            if data is not None:
                argv += ["--data-dir", str(data), "--data-workers", str(WORKERS)]
            result, _ = run_json(argv, env=bench_env(threads), marker="DLRUN_RESULT ")
            results.setdefault(name, []).append(result)
            return float(result["value"])
        return once

    with tempfile.TemporaryDirectory(prefix="dlrun-bench-data-") as tmp:
        root = Path(tmp)
        variants = {"synthetic": variant("synthetic", None),
                    "jpeg": variant("jpeg", _synth(root, "jpeg", threads)),
                    "tfrecord": variant("tfrecord", _synth(root, "tfrecord", threads))}
        log(f"[8] {MODEL} fp32 batch {BATCH}, {WARMUP}+{steps} steps, {threads} threads; real data: {IMAGES} "
            f"images of {SIZE}x{SIZE}, {WORKERS} data workers")
        samples = alternate(variants, repeats, log)
    rows = []
    record = {"goal": GOAL, "model": MODEL, "batch": BATCH, "steps": steps, "warmup_steps": WARMUP,
              "workers": WORKERS, "images": IMAGES, "size": SIZE, "threads": threads, "samples_img_s": samples,
              "results": {name: [{k: r.get(k) for k in ("value", "data_source", "images_decoded", "data_images",
                                                        "channels_last", "allocator")} for r in rs]
                          for name, rs in results.items()}}
    for fmt in ("jpeg", "tfrecord"):
        ratio = median([r / s for r, s in zip(samples[fmt], samples["synthetic"])])
        decoded = [r.get("images_decoded") for r in results[fmt]]
        wrong = any(r.get("data_source") != fmt or not r.get("images_decoded") for r in results[fmt])
        record[f"{fmt}_ratio"] = ratio
        rows.append(Row("8 real data", f"resnet50 fp32 b{BATCH}: {fmt} ({WORKERS} workers)/synthetic", ratio,
                        goal=GOAL, detail=f"median of per-round ratios; {fmt} {spread(samples[fmt])} vs synthetic "
                                          f"{spread(samples['synthetic'])} img/s; images decoded per run {decoded}"
                                          + (" (WRONG: did not read the dataset)" if wrong else ""),
                        status="FAIL" if wrong else ""))
    write_result("realdata", record)
    return rows


if __name__ == "__main__":
    from rich.console import Console

    console = Console(stderr=True, highlight=False)
    for row in measure(int(sys.argv[1]) if len(sys.argv) > 1 else 2, 3, lambda line: console.print(line)):
        print(row.judge().to_dict())
