"""Measurements dlrun takes in its own process and stores as results: the matrix-multiply rate of a
system, the practical compute ceiling its training FLOP rates are compared with.

Layer: after results/ (it stores through it), before execute/. It imports PyTorch, late.

The rate is 2 n^3 FLOP over the median time of `repeats` products of two n x n matrices, after two
untimed ones. fp32 on a CPU takes the faster of torch.mm (MKL, whose sgemm takes a generic AVX2 path on
AMD CPUs) and oneDNN's product (AVX-512 kernels), so that efficiency is never flattered by a slow
reference; amp measures the type autocast trains in: bfloat16 on a CPU, float16 on a GPU. On a CPU the
rate is the node's (all threads); on a GPU it is one device's (fp32 without TF32).
"""
from __future__ import annotations

import platform
import secrets
import socket
import time
from collections.abc import Callable
from typing import Any

from dlrun.harness.harness_contract import PRECISION_OF_DTYPE, PRECISIONS, ran_dtype
from dlrun.results.fingerprint import this_machine

__all__ = ["DEFAULT_PRECISIONS", "PRECISIONS", "matmul_ceiling", "matmul_record", "measure_matmul"]

#: What `dlrun measure matmul` measures unless --precision says: the two a training run compares against.
DEFAULT_PRECISIONS = ("fp32", "amp")
#: Untimed products before the timed ones.
WARMUP = 2

#: Told after each product: (products done, products in all, what is being measured).
Progress = Callable[[int, int, str], None]


def products(precision: str, repeats: int, device: str) -> int:
    """How many products one measurement computes (warm-up included): fp32 on a CPU times two methods."""
    methods = 2 if precision == "fp32" and device == "cpu" else 1
    return methods * (WARMUP + repeats)


def _rate(fn, flop: float, repeats: int, sync, tick: Callable[[], None]) -> float:
    for _ in range(WARMUP):
        fn()
        sync()
        tick()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
        tick()
    times.sort()
    return flop / times[len(times) // 2] / 1e9


def measure_matmul(precision: str, size: int = 4096, repeats: int = 7, threads: int | None = None,
                   device: str | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """One measurement: GFLOP/s and how it was taken, as the result row stores it. `progress` is told after
    each product (the CLI's progress line)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    flop = 2.0 * size ** 3
    total, done = products(precision, repeats, device), 0

    def ticker(what: str) -> Callable[[], None]:
        def tick() -> None:
            nonlocal done
            done += 1
            if progress is not None:
                progress(min(done, total), total, what)
        return tick

    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    rates: dict[str, float] = {}
    if precision == "tf32" and device != "cuda":
        raise ValueError("tf32 is a mode of NVIDIA tensor cores; this node measures on its CPU")
    if precision in ("fp32", "tf32"):
        if device == "cuda":  # fp32: a true fp32 product, as the fp32 peak is quoted; tf32: tensor cores
            torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        rates["mm"] = _rate(lambda: torch.mm(a, b), flop, repeats, sync, ticker(f"{precision} torch.mm"))
        if device == "cpu":
            try:
                am, bm = a.to_mkldnn(), b.to_mkldnn()
                rates["onednn"] = _rate(lambda: torch._C._nn.mkldnn_linear(am, bm, None), flop, repeats, sync,
                                        ticker("fp32 oneDNN"))
            except (RuntimeError, AttributeError):  # torch without oneDNN tensors
                pass
        dtype = "tf32" if precision == "tf32" else "float32"
    else:
        dtype = ran_dtype(precision, device)  # amp: the type autocast trains a CNN in on this device
        ah, bh = a.to(getattr(torch, dtype)), b.to(getattr(torch, dtype))
        rates["mm"] = _rate(lambda: torch.mm(ah, bh), flop, repeats, sync, ticker(f"{precision} {dtype} torch.mm"))
    method = max(rates, key=rates.get)
    return {"metric": "matmul", "value": rates[method], "unit": "GFLOP/s", "dtype": dtype, "method": method,
            "rates": rates, "size": size, "repeats": repeats, "threads": torch.get_num_threads(),
            "device": device, "device_name": torch.cuda.get_device_name() if device == "cuda" else platform.processor(),
            "framework": "pytorch", "framework_version": str(torch.__version__)}


def matmul_record(system: str, precision: str, row: dict[str, Any],
                  now: float | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(run, rows) for Store.add_run: workload `matmul` on `system`, one `matmul` result row."""
    now = time.time() if now is None else now
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    run = {"id": time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + "-" + secrets.token_hex(3),
           "created_at": stamp, "finished_at": stamp, "status": "ok", "workload": "matmul", "model": None,
           "image": "host", "image_digest": None, "system": system, "nodes": 1, "ranks_per_node": 1,
           "world_size": 1, "precision": precision, "origin": "local",
           "plan": {"benchmark": "matmul", "system": system, "precision": precision, "size": row["size"],
                    "repeats": row["repeats"], "threads": row["threads"], "device": row["device"]},
           "provenance": {"hostname": socket.gethostname(), "python": platform.python_version(),
                          "framework_version": row["framework_version"]},
           "fingerprint": this_machine(fabric=None, nodes=1, device=row.get("device"))}  # measured on this node
    return run, [row]


def matmul_ceiling(store: Any, system: str, dtype: str) -> float | None:
    """The newest stored matmul rate of `system` in the element type `dtype` (GFLOP/s): a measurement at the
    precision that names it (bf16 for bfloat16), or one of `amp` that ran in it (amp measures float16 on a
    GPU, bfloat16 on a CPU). The ceiling a run is quoted against is the type it really computes in."""
    found = [row for row in (store.latest_matmul(system, PRECISION_OF_DTYPE.get(dtype, dtype)),
                             store.latest_matmul(system, "amp")) if row and row.get("gflops")
             and (row.get("data") or {}).get("dtype") == dtype]
    if not found:
        return None
    return float(max(found, key=lambda row: (row["created_at"], row["run_id"]))["gflops"])

