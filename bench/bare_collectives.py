"""dlrun's collective benchmark vs the plainest torch.distributed loop, side by side in one process group.

Run under mpirun (bench/collectives.py starts it with the mpirun line, environment and allocator dlrun
generates for `dlrun run COLLECTIVE --ranks-per-node 2`). For each collective and size, rounds alternate
(A B, B A, ...) between
  * harness: the harness's own code, imported from the shipped file (`Collective` buffers and calls, `_time`:
    warm-up, barrier, timed back-to-back calls), exactly what `--benchmark COLLECTIVE` times, and
  * bare: what a user would write: buffers, warm-up, barrier, a timed loop of the torch.distributed call.
Each side's time per call is the slowest rank's mean; busbw as nccl-tests defines it (both sides use the
same sizes and factors). Rank 0 prints one JSON line with every round's busbw per size and side.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launcher" / "dlrun" / "workloads"))
import harness_pytorch_collectives as harness  # noqa: E402  (the shipped harness file itself)
from harness_pytorch_comm import Comm  # noqa: E402

COLLECTIVES = ("allreduce", "broadcast", "allgather", "reducescatter", "alltoall")


def bare_call(name: str, n: int, nbytes: int):
    elements = nbytes // 4
    if name == "allreduce":
        buf = torch.zeros(elements)
        return lambda: dist.all_reduce(buf)
    if name == "broadcast":
        buf = torch.zeros(elements)
        return lambda: dist.broadcast(buf, 0)
    if name == "allgather":
        inp, out = torch.zeros(elements // n), torch.zeros(elements)
        return lambda: dist.all_gather_single(out, inp)
    if name == "reducescatter":
        inp, out = torch.zeros(elements), torch.zeros(elements // n)
        return lambda: dist.reduce_scatter_single(out, inp)
    inp, out = torch.zeros(elements), torch.zeros(elements)
    return lambda: dist.all_to_all_single(out, inp)


def bare_time(name: str, n: int, nbytes: int, iters: int, warmup: int) -> float:
    call = bare_call(name, n, nbytes)
    for _ in range(warmup):
        call()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        call()
    return (time.perf_counter() - start) / iters


def harness_time(name: str, comm: Comm, nbytes: int, iters: int, warmup: int) -> float:
    coll = harness.Collective(name, dist, comm.rank, comm.world_size, nbytes, torch.device("cpu"))
    return harness._time(coll, iters, warmup, comm, torch.device("cpu"))


def slowest(seconds: float) -> float:
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t[0])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--benchmarks", default=",".join(COLLECTIVES))
    p.add_argument("--min-bytes", type=int, default=1 << 20)
    p.add_argument("--max-bytes", type=int, default=16 << 20)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rank, n = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    comm = Comm(rank, n, "gloo", torch.device("cpu"))
    comm.init()
    out = {"world_size": n, "torch": torch.__version__, "iterations": args.iters, "warmup_iterations": args.warmup,
           "rounds": args.rounds, "preload": os.environ.get("LD_PRELOAD"), "collectives": {}}
    for name in args.benchmarks.split(","):
        whole = harness.COLLECTIVES[name][3]
        sizes = harness.message_sizes(args.min_bytes, args.max_bytes, 2, n if whole else 1)
        factor = harness.busbw_factor(name, n)
        rows = []
        for nbytes in sizes:
            busbw: dict[str, list[float]] = {"harness": [], "bare": []}
            for round_ in range(args.rounds):
                order = ("harness", "bare") if round_ % 2 == 0 else ("bare", "harness")
                for side in order:
                    local = (harness_time(name, comm, nbytes, args.iters, args.warmup) if side == "harness"
                             else bare_time(name, n, nbytes, args.iters, args.warmup))
                    busbw[side].append(nbytes / slowest(local) / 1e9 * factor)
            rows.append({"bytes": nbytes, "busbw_gbs": busbw})
        out["collectives"][name] = rows
    comm.destroy()
    if rank == 0:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
