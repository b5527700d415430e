"""What pays for ResNet-50 training on this CPU: each candidate setting timed with the bare loop, alternated.

Not part of `make bench` (it takes about ten minutes, most of it torch.compile); run it when the machine,
torch or the harness defaults change: `python bench/explore.py [--rounds 2]`. Writes results/explore.json;
bench/RESULTS.md records what it found and which defaults follow from it.
"""
from __future__ import annotations

import argparse
import sys

from common import BENCH_DIR, PYTHON, bench_env, cpu_count, median, run_json, spread, write_result

MODEL = "resnet50_v1.5"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--compile-rounds", type=int, default=1)
    p.add_argument("--only", action="append", help="run only the variants with these names (repeatable)")
    args = p.parse_args()
    threads = cpu_count()
    # name -> (bare_loop options, rounds); compiled variants run once: compiling costs minutes on 2 cores.
    variants = {
        "fp32 NCHW": (["--precision", "fp32", "--channels-last", "off"], args.rounds),
        "fp32 NHWC": (["--precision", "fp32", "--channels-last", "on"], args.rounds),
        "fp32 NHWC 1 thread": (["--precision", "fp32", "--channels-last", "on", "--threads", "1"], 1),
        "fp32 NHWC batch 32": (["--precision", "fp32", "--channels-last", "on", "--batch-size", "32"], 1),
        "amp NCHW": (["--precision", "amp", "--channels-last", "off"], args.rounds),
        "amp NHWC": (["--precision", "amp", "--channels-last", "on"], args.rounds),
    }
    if not args.no_compile:
        variants["fp32 NHWC compiled"] = (["--precision", "fp32", "--channels-last", "on", "--compile"],
                                          args.compile_rounds)
        variants["amp NHWC compiled"] = (["--precision", "amp", "--channels-last", "on", "--compile"],
                                         args.compile_rounds)
    if args.only:
        variants = {name: v for name, v in variants.items() if name in args.only}
    samples: dict[str, list[dict]] = {name: [] for name in variants}
    for round_ in range(max(r for _, r in variants.values())):
        for name, (opts, rounds) in variants.items():
            if round_ >= rounds:
                continue
            argv = [PYTHON, str(BENCH_DIR / "bare_loop.py"), "--model", MODEL, "--batch-size", str(args.batch_size),
                    "--steps", str(args.steps), "--warmup-steps", "2", "--threads", str(threads), *opts]
            data, wall = run_json(argv, env=bench_env(threads))
            data["process_wall_s"] = wall
            samples[name].append(data)
            print(f"round {round_ + 1} {name}: {data['images_per_sec']:.2f} img/s "
                  f"(warm-up {data['warmup_s']:.0f} s, process {wall:.0f} s)", flush=True)
    summary = {name: median([d["images_per_sec"] for d in runs]) for name, runs in samples.items()}
    for name, runs in samples.items():
        print(f"{name:24s} {spread([d['images_per_sec'] for d in runs])} img/s")
    write_result("explore-" + "-".join(sorted(n.replace(" ", "_") for n in variants)) if args.only else "explore", {"model": MODEL, "threads": threads, "samples": samples, "median_img_s": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
