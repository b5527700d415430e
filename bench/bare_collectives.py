"""The yardstick for dlrun's collective benchmarks: the plainest torch.distributed loop a user would write.

Per message size: allocate the buffers, `--warmup` untimed calls, a barrier, `--iters` calls timed as one span,
each rank's mean time per call, the maximum over ranks; sizes, algbw and busbw as nccl-tests define them (the
same definitions as the harness, so the two compare number for number). No checking, no table: nothing but the
collective in the loop. Started by the same mpirun line as the harness; rank 0 prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist

WHOLE = {"allgather", "reducescatter", "alltoall"}  # the size is the buffer over all ranks


def _op(name: str, n: int, nbytes: int):
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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--benchmark", required=True, choices=("allreduce", "broadcast", "allgather", "reducescatter",
                                                          "alltoall"))
    p.add_argument("--min-bytes", type=int, default=1 << 20)
    p.add_argument("--max-bytes", type=int, default=16 << 20)
    p.add_argument("--size-factor", type=int, default=2)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rank, n = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                            rank=rank, world_size=n)
    factor = {"allreduce": 2 * (n - 1) / n, "broadcast": 1.0}.get(args.benchmark, (n - 1) / n)
    block = 4 * n if args.benchmark in WHOLE else 4
    rows = []
    size = args.min_bytes
    while size <= args.max_bytes:
        nbytes = max(size // block, 1) * block
        call = _op(args.benchmark, n, nbytes)
        for _ in range(args.warmup):
            call()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.iters):
            call()
        local = torch.tensor([(time.perf_counter() - start) / args.iters], dtype=torch.float64)
        dist.all_reduce(local, op=dist.ReduceOp.MAX)
        seconds = float(local[0])
        algbw = nbytes / seconds / 1e9
        rows.append({"bytes": nbytes, "time_us": seconds * 1e6, "algbw_gbs": algbw, "busbw_gbs": algbw * factor})
        size *= args.size_factor
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps({"benchmark": args.benchmark, "world_size": n, "torch": torch.__version__,
                          "iterations": args.iters, "warmup_iterations": args.warmup, "sizes": rows}))


if __name__ == "__main__":
    main()
