"""Benchmark 2: the harness's ResNet-50 training FLOP rate over the best fp32 matrix-product rate, and the
mixed-precision (bf16 autocast, channels-last) speed-up over fp32 - both with the harness's own defaults.

Training FLOP per image = 3 (forward + backward: data and weight gradients) x 2 (multiply + add) x the
forward multiply-adds counted on the harness's own model (`--describe`: 4.089 G for ResNet-50 v1.5).
The harness runs as `dlrun run` starts it (same script, same options); fp32 and amp runs are alternated.
"Before" rows run the harness under glibc's malloc (`--allocator system`), as it ran before it started
preloading a caching allocator (tcmalloc), with PyTorch's default optimizer step (`--fused-optimizer off`), and
with PyTorch's batch norm, addition and ReLU instead of the fused kernel (`--fused-bn-relu off`).
amp runs only where the CPU multiplies bf16 natively (see `bf16_verdict`).

The goal's row is batch 16, what `dlrun run resnet50` trains with on this machine (the detected `localhost`
system's default batch). The workload's catalog batch (64, what systems without a batch of their own use) is a
row of its own, for information: on a 2-core Zen 5 it ran about 3 % faster per image than batch 16 in
side-by-side runs (oneDNN's convolutions have more work to split between the threads).
"""
from __future__ import annotations

import sys

from common import BENCH_DIR, HARNESS, PYTHON, Row, alternate, bench_env, median, run_json, spread, write_result

EFFICIENCY_GOAL = 0.75
AMP_GOAL = 2.0
MODEL = "resnet50_v1.5"
WORKLOAD = "resnet50"


def _harness(threads: int, batch: int, steps: int, warmup: int, precision: str, extra: list[str] = (),
             model: str = MODEL) -> dict:
    data, _ = run_json([PYTHON, str(HARNESS), "--model", model, "--batch-size", str(batch), "--steps", str(steps),
                        "--warmup-steps", str(warmup), "--precision", precision, "--device", "cpu",
                        "--threads", str(threads), "--expected-world-size", "1", *extra],
                       env=bench_env(threads), marker="DLRUN_RESULT ")
    return data


def matmul_ceiling(threads: int) -> dict:
    data, _ = run_json([PYTHON, str(BENCH_DIR / "matmul.py"), "--threads", str(threads)], env=bench_env(threads))
    return data


def bf16_verdict(ceiling: dict) -> str | None:
    """None where amp can be measured; else why not, with the numbers. Without native bf16 arithmetic
    (AVX512-BF16, AMX) bf16 products take a scalar path about 100x slower than fp32, so amp cannot beat fp32
    and a run would take hours."""
    if ceiling.get("bf16_native", True):
        return None
    return (f"not measured: no native bf16 on this CPU (ISA {ceiling.get('cpu_capability')}, flags "
            f"{' '.join(ceiling.get('cpu_flags') or []) or '-'}): bf16 torch.mm {ceiling['bf16_mm_gflops']:.2f} "
            f"vs fp32 {ceiling['fp32_ceiling_gflops']:.0f} GFLOP/s, so amp cannot beat fp32 here")


def amp_rows(bench: str, label: str, samples: dict[str, list[float]], ceilings: list[dict], goal: float,
             no_amp: str | None, unit: str) -> list[Row]:
    """The amp / fp32 row, and beside it the speed-up as a share of this processor's bf16 / fp32 matrix-product
    ratio. A bf16 step gains about what its matrix products gain (the rest at most the 2x of halved bytes),
    so a goal above that ratio assumes faster bf16 hardware (tensor cores, AMX) than this processor has: the
    row is then not judged (N/A) and says why with the numbers, rather than a MISS that reads as the
    harness's fault. Measured here: the products' ratio is bf16 torch.mm over the best fp32 product."""
    name = f"{label} amp (bf16) / fp32 throughput"
    if no_amp is not None:
        return [Row(bench, name, None, goal=goal, status="N/A", detail=no_amp)]
    speedup = median([a / f for a, f in zip(samples["amp"], samples["fp32"])])
    native = [c for c in ceilings if c.get("bf16_native") and c.get("bf16_mm_gflops")]
    measured = f"median of per-round ratios; amp {spread(samples['amp'])} vs fp32 {spread(samples['fp32'])} {unit}"
    if not native:
        return [Row(bench, name, speedup, goal=goal, detail=measured)]
    hw = median([c["bf16_mm_gflops"] / c["fp32_ceiling_gflops"] for c in native])
    products = (f"bf16 torch.mm {median([c['bf16_mm_gflops'] for c in native]):.0f} vs fp32 "
                f"{median([c['fp32_ceiling_gflops'] for c in native]):.0f} GFLOP/s")
    beyond = hw < goal
    return [Row(bench, name, speedup, goal=goal, status="N/A" if beyond else "",
                detail=(f"not judged: the goal assumes bf16 matrix products at least {goal:g}x fp32 (tensor cores, "
                        f"AMX); here they run {hw:.2f}x ({products}); " if beyond else "") + measured),
            Row(bench, f"{label} amp speed-up / the bf16 / fp32 matrix-product ratio", speedup / hw,
                detail=f"{speedup:.3f}x of {hw:.2f}x ({products}, medians over the rounds); informational")]


def workload_batch(name: str = WORKLOAD) -> int:
    """The workload's catalog batch (default_batch_size), which a system without its own batch for it uses."""
    sys.path.insert(0, str(BENCH_DIR.parent / "launcher"))
    from dlrun.catalog.loader import load_catalog

    return int(load_catalog().workloads[name].default_batch_size)


def measure(threads: int, repeats: int, log, quick: bool = False, before: bool = True) -> list[Row]:
    sys.path.insert(0, str(BENCH_DIR.parent / "launcher"))
    from dlrun.harness import describe_model

    macs = describe_model(MODEL)["forward_macs"]
    train_flop = 3 * 2 * macs
    batch, steps, warmup = 16, 6, 2
    big = workload_batch()
    ceilings: list[dict] = []
    results: dict[str, list[dict]] = {"fp32": [], "fp32_default_batch": [], "amp": [], "fp32_glibc": [],
                                      "fp32_unfused": [], "fp32_bn_relu_off": []}

    probe = matmul_ceiling(threads)  # decides whether amp can run here; it is round 1's ceiling too
    no_amp = bf16_verdict(probe)
    pending = [probe]

    def matmul():
        ceilings.append(pending.pop() if pending else matmul_ceiling(threads))
        return float(ceilings[-1]["fp32_ceiling_gflops"])

    def variant(name, precision, extra=(), steps=steps, batch=batch):
        def fn():
            res = _harness(threads, batch, steps, warmup, precision, list(extra))
            results[name].append(res)
            return float(res["value"])
        return fn

    # The ceiling is measured in every round, next to the fp32 run it is compared with.
    variants = {"matmul": matmul, "fp32": variant("fp32", "fp32")}
    if not quick:  # about 5 s a step on 2 cores: 2 warm-up + 3 timed steps
        variants["fp32_default_batch"] = variant("fp32_default_batch", "fp32", steps=3, batch=big)
    if no_amp is None:
        variants["amp"] = variant("amp", "amp")
    if before and not quick:
        variants["fp32_glibc"] = variant("fp32_glibc", "fp32", ["--allocator", "system"])
        variants["fp32_unfused"] = variant("fp32_unfused", "fp32", ["--fused-optimizer", "off"])
        variants["fp32_bn_relu_off"] = variant("fp32_bn_relu_off", "fp32", ["--fused-bn-relu", "off"])
    log(f"[2] fp32 matmul ceiling (GFLOP/s), then harness {MODEL} batch {batch}, {warmup}+{steps} steps: "
        f"fp32 vs amp (bf16 autocast), {threads} threads")
    samples = alternate(variants, repeats, log)
    ceiling = median(samples["matmul"])
    fp32 = median(samples["fp32"])
    eff = median([f * train_flop / 1e9 / m for f, m in zip(samples["fp32"], samples["matmul"])])
    eff_big = median([f * train_flop / 1e9 / m for f, m in zip(samples.get("fp32_default_batch", []),
                                                               samples["matmul"])]) if not quick else None
    # Paired per-round ratios (each round runs the variants back to back) cancel slow load drift.
    fp32_gflops = fp32 * train_flop / 1e9
    cl = results["fp32"][-1]["channels_last"]
    rows = [
        Row("2 efficiency", f"ResNet-50 fp32 training FLOP rate / fp32 matmul, batch {batch}", eff,
            goal=EFFICIENCY_GOAL,
            detail=f"median of per-round ratios; {fp32:.2f} img/s x {train_flop / 1e9:.1f} GFLOP = "
                   f"{fp32_gflops:.0f} GFLOP/s vs matmul "
                   f"{ceiling:.0f} GFLOP/s (the faster of MKL torch.mm "
                   f"{median([c['fp32_mm_gflops'] for c in ceilings]):.0f} and oneDNN "
                   f"{median([c.get('fp32_onednn_gflops', 0) for c in ceilings]):.0f}, ISA "
                   f"{ceilings[-1].get('cpu_capability')}); "
                   f"{'NHWC' if cl else 'NCHW'}; fused SGD {results['fp32'][-1].get('fused_optimizer')}; fused batch "
            f"norm + ReLU {results['fp32'][-1].get('knobs', {}).get('fused_bn_relu', {}).get('value')}"),
    ]
    amp = amp_rows("2 efficiency", "ResNet-50 (NHWC)", samples, ceilings, AMP_GOAL, no_amp, "img/s")
    rows += amp
    allocator = results["fp32"][-1].get("allocator")
    rows[0].detail += f"; allocator {allocator}"
    if eff_big is not None:
        rows.insert(1, Row("2 efficiency", f"ResNet-50 fp32 training FLOP rate / fp32 matmul, batch {big} "
                                           f"(the workload's catalog batch)", eff_big,
                           detail=f"median of per-round ratios; {spread(samples['fp32_default_batch'])} img/s; "
                                  f"matmul {ceiling:.0f} GFLOP/s; {warmup}+3 steps; same knobs as batch {batch}"))
    if "fp32_glibc" in samples:
        old = median(samples["fp32_glibc"])
        gain = median([f / b for f, b in zip(samples["fp32"], samples["fp32_glibc"])])
        rows.append(Row("2 efficiency", f"fp32 default ({allocator}) / fp32 glibc malloc (before)", gain,
                        detail=f"median of per-round ratios; glibc {spread(samples['fp32_glibc'])} img/s = "
                               f"{old * train_flop / 1e9 / ceiling:.2f} of the ceiling"))
    if "fp32_unfused" in samples:
        gain = median([f / b for f, b in zip(samples["fp32"], samples["fp32_unfused"])])
        rows.append(Row("2 efficiency", "ResNet-50 fp32 fused SGD (new default) / PyTorch's default step (before)",
                        gain, detail=f"median of per-round ratios; before {spread(samples['fp32_unfused'])} img/s"))
    if "fp32_bn_relu_off" in samples:
        gain = median([f / b for f, b in zip(samples["fp32"], samples["fp32_bn_relu_off"])])
        off = median(samples["fp32_bn_relu_off"])
        rows.append(Row("2 efficiency", "ResNet-50 fp32 fused batch norm + ReLU (new default) / PyTorch's ops "
                                        "(before)", gain,
                        detail=f"median of per-round ratios; before {spread(samples['fp32_bn_relu_off'])} img/s = "
                               f"{off * train_flop / 1e9 / ceiling:.2f} of the ceiling"))
    write_result("efficiency", {"model": MODEL, "forward_macs": macs, "train_flop_per_image": train_flop,
                                "threads": threads, "batch": batch, "steps": steps, "warmup_steps": warmup,
                                "matmul": ceilings, "ceiling_gflops": ceiling, "samples_img_s": samples,
                                "default_batch": big, "efficiency": eff, "efficiency_default_batch": eff_big,
                                "amp_speedup": amp[0].value, "amp_not_measured": no_amp,
                                "goals": {"efficiency": EFFICIENCY_GOAL, "amp_speedup": AMP_GOAL},
                                "harness_results": {k: v[-1:] for k, v in results.items()}})
    return rows
