"""Benchmark 2b: the harness's BERT-base SQuAD training FLOP rate over the best fp32 matrix-product rate, and the
mixed-precision (bf16 autocast) speed-up over fp32 - both with the harness's own defaults.

Training FLOP per sequence = 3 (forward + backward) x 2 x the forward multiply-adds counted on the harness's own
model (`--describe`: 35.33 G per 384-token sequence: every weight layer and attention's two products), the same
definition as benchmark 2's ResNet-50 rows. 12 layers and 384 tokens as the workload runs; a smaller batch than
the workload's 32 windows so that a round takes seconds, not minutes. The ceiling is measured in every round next
to the runs it is compared with; variants are alternated. A "before" variant runs PyTorch's default optimizer
step (`--fused-optimizer off`), as the harness did before it took the fused one.

amp is measured only where the CPU multiplies bf16 natively (the ceiling's bf16 probe reaches a quarter of the
fp32 rate); elsewhere bf16 products run a scalar path about 100x slower than fp32 and the amp row says so with the
measured rates instead of running for hours.
"""
from __future__ import annotations

import sys

from common import BENCH_DIR, Row, alternate, median, spread, write_result
from efficiency import _harness, amp_rows, bf16_verdict, matmul_ceiling

EFFICIENCY_GOAL = 0.60
AMP_GOAL = 1.5
MODEL = "bert_squad"


def measure(threads: int, repeats: int, log, quick: bool = False, before: bool = True) -> list[Row]:
    sys.path.insert(0, str(BENCH_DIR.parent / "launcher"))
    from dlrun.harness import describe_model

    macs = describe_model(MODEL)["forward_macs"]  # per sequence
    train_flop = 3 * 2 * macs
    batch, steps, warmup = (1, 1, 1) if quick else (4, 2, 1)
    probe = matmul_ceiling(threads)  # decides whether amp can run here; it is round 1's ceiling too
    no_amp = bf16_verdict(probe)
    pending, ceilings = [probe], []
    results: dict[str, list[dict]] = {"fp32": [], "amp": [], "fp32_unfused": []}

    def matmul():
        ceilings.append(pending.pop() if pending else matmul_ceiling(threads))
        return float(ceilings[-1]["fp32_ceiling_gflops"])

    def variant(name, precision, extra=()):
        def fn():
            res = _harness(threads, batch, steps, warmup, precision, list(extra), model=MODEL)
            results[name].append(res)
            return float(res["value"])
        return fn

    variants = {"matmul": matmul, "fp32": variant("fp32", "fp32")}
    if no_amp is None:
        variants["amp"] = variant("amp", "amp")
    if before and not quick:
        variants["fp32_unfused"] = variant("fp32_unfused", "fp32", ["--fused-optimizer", "off"])
    log(f"[2b] fp32 matmul ceiling (GFLOP/s), then harness {MODEL} batch {batch} x 384 tokens, 12 layers, "
        f"{warmup}+{steps} steps: {', '.join(v for v in variants if v != 'matmul')}, {threads} threads")
    samples = alternate(variants, repeats, log)
    ceiling = median(samples["matmul"])
    fp32 = median(samples["fp32"])
    eff = median([f * train_flop / 1e9 / m for f, m in zip(samples["fp32"], samples["matmul"])])
    rows = [Row("2b efficiency", "BERT-base SQuAD fp32 training FLOP rate / fp32 matmul", eff, goal=EFFICIENCY_GOAL,
                detail=f"median of per-round ratios; {fp32:.3f} seq/s x {train_flop / 1e9:.0f} GFLOP = "
                       f"{fp32 * train_flop / 1e9:.0f} GFLOP/s vs matmul {ceiling:.0f} GFLOP/s (MKL torch.mm "
                       f"{median([c['fp32_mm_gflops'] for c in ceilings]):.0f}, oneDNN "
                       f"{median([c.get('fp32_onednn_gflops', 0) for c in ceilings]):.0f}, ISA "
                       f"{ceilings[-1].get('cpu_capability')}); "
                       f"batch {batch}; "
                       f"fused optimizer {results['fp32'][-1].get('fused_optimizer')}")]
    rows += amp_rows("2b efficiency", "BERT-base SQuAD", samples, ceilings, AMP_GOAL, no_amp, "seq/s")
    if "fp32_unfused" in samples:
        gain = median([f / b for f, b in zip(samples["fp32"], samples["fp32_unfused"])])
        rows.append(Row("2b efficiency", "BERT fp32 fused AdamW (new default) / PyTorch's default step (before)",
                        gain, detail=f"median of per-round ratios; before {spread(samples['fp32_unfused'])} seq/s "
                                     f"= {median(samples['fp32_unfused']) * train_flop / 1e9 / ceiling:.2f} of "
                                     "the ceiling"))
    write_result("efficiency_bert", {"model": MODEL, "forward_macs_per_sequence": macs,
                                     "train_flop_per_sequence": train_flop, "threads": threads, "batch": batch,
                                     "steps": steps, "warmup_steps": warmup, "matmul": ceilings,
                                     "ceiling_gflops": ceiling, "samples_seq_s": samples, "efficiency": eff,
                                     "amp_not_measured": no_amp,
                                     "goals": {"efficiency": EFFICIENCY_GOAL, "amp_speedup": AMP_GOAL},
                                     "harness_results": {k: v[-1:] for k, v in results.items()}})
    return rows
