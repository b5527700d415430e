"""The compute ceiling: the best fp32 (and bf16) rate of a large matrix product with this torch and these threads.

torch.mm goes to MKL, whose sgemm takes a generic AVX2 path on AMD CPUs; oneDNN (the library behind torch's
CPU convolutions) has AVX-512 kernels for the same product. Both are measured and the higher rate is the
ceiling, so that efficiency is never flattered by a slow reference. Prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import time

import torch


def _rate(fn, flops: float, repeats: int) -> float:
    fn()
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return flops / times[len(times) // 2] / 1e9  # median


def _cpu_flags() -> list[str]:
    """The vector and matrix extensions this CPU reports (Linux), which decide the kernels oneDNN and MKL run."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        return []
    return sorted(x for x in flags if x in ("avx2", "fma") or x.startswith(("avx512", "amx")))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    n = args.size
    flops = 2.0 * n ** 3
    a = torch.randn(n, n)
    b = torch.randn(n, n)
    out = {"size": n, "threads": torch.get_num_threads(), "torch": torch.__version__}
    out["fp32_mm_gflops"] = _rate(lambda: torch.mm(a, b), flops, args.repeats)
    try:
        am, bm = a.to_mkldnn(), b.to_mkldnn()
        out["fp32_onednn_gflops"] = _rate(lambda: torch._C._nn.mkldnn_linear(am, bm, None), flops, args.repeats)
    except Exception as exc:  # torch without oneDNN tensors
        out["fp32_onednn_error"] = f"{type(exc).__name__}: {exc}"
    out["fp32_ceiling_gflops"] = max(v for k, v in out.items() if k.startswith("fp32_") and k.endswith("_gflops"))
    # bf16: a probe first. Without native bf16 arithmetic (AVX512-BF16, AMX) torch.mm takes a scalar path at
    # about 1 GFLOP/s, where the full-size product would take minutes; the probe's rate is then the answer.
    m = 512
    probe = _rate(lambda: torch.mm(a[:m, :m].bfloat16(), b[:m, :m].bfloat16()), 2.0 * m ** 3, 1)
    out["bf16_native"] = probe >= 0.25 * out["fp32_ceiling_gflops"]
    if out["bf16_native"]:
        ab, bb = a.bfloat16(), b.bfloat16()
        out["bf16_mm_gflops"] = _rate(lambda: torch.mm(ab, bb), flops, args.repeats)
    else:
        out["bf16_mm_gflops"] = probe
        out["bf16_mm_size"] = m
    out["cpu_capability"] = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: None)()
    out["cpu_flags"] = _cpu_flags()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
