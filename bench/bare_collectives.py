"""dlrun's collective benchmark vs the plainest torch.distributed loop, side by side in one process group.

Run under mpirun (bench/collectives.py starts it with the mpirun line, environment and allocator dlrun
generates for `dlrun run COLLECTIVE --ranks-per-node 2`). For each collective and size, in each round, calls
alternate one by one (A B, B A, ...) between
  * harness: the harness's own code, imported from the shipped file: `Collective` (its buffers, and `run`,
    the one call its timed loop `_time` repeats back to back), and
  * bare: what a user would write: buffers and the torch.distributed call.
Each side's time per call is the slowest rank's mean over the round; busbw as nccl-tests defines it (both
sides use the same sizes and factors). Rank 0 prints one JSON line with every round's busbw per size and side.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launcher" / "dlrun" / "harness"))
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


def paired(name: str, comm: Comm, nbytes: int, pairs: int, warmup: int) -> dict[str, dict[str, float]]:
    """Seconds per call of each side, as the mean (the harness's definition) and the median (robust to the
    calls a loaded machine preempts), each the slowest rank's: the harness's `Collective.run` (the one call
    its timed loop repeats) and the bare call alternate call by call (harness first on even calls), each call
    timed on its own, so that both meet the same machine load within milliseconds."""
    coll = harness.Collective(name, dist, comm.rank, comm.world_size, nbytes, torch.device("cpu"))
    sides = {"harness": coll.run, "bare": bare_call(name, comm.world_size, nbytes)}
    for _ in range(warmup):
        for call in sides.values():
            call()
    comm.barrier()
    spent: dict[str, list[float]] = {"harness": [], "bare": []}
    cpu: dict[str, float] = {"harness": 0.0, "bare": 0.0}
    clock, cpu_clock = time.perf_counter, time.process_time
    for i in range(pairs):
        for side in (("harness", "bare") if i % 2 == 0 else ("bare", "harness")):
            call = sides[side]
            start, cpu_start = clock(), cpu_clock()
            call()
            spent[side].append(clock() - start)
            cpu[side] += cpu_clock() - cpu_start
    # CPU seconds per call (this process, gloo's threads included): what a call costs the machine, which
    # other processes on a shared one change less than its wall time
    return {side: {"mean": slowest(sum(times) / pairs), "median": slowest(statistics.median(times)),
                   "cpu": slowest(cpu[side] / pairs)} for side, times in spent.items()}


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
    p.add_argument("--out", default=None, help="write the JSON here instead of stdout (mpirun's output forwarding "
                                               "breaks lines of more than a few KiB)")
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
            robust: dict[str, list[float]] = {"harness": [], "bare": []}
            cpu: dict[str, list[float]] = {"harness": [], "bare": []}
            for _ in range(args.rounds):
                for side, seconds in paired(name, comm, nbytes, args.iters, args.warmup).items():
                    busbw[side].append(nbytes / seconds["mean"] / 1e9 * factor)
                    robust[side].append(nbytes / seconds["median"] / 1e9 * factor)
                    cpu[side].append(seconds["cpu"])
            rows.append({"bytes": nbytes, "busbw_gbs": busbw, "busbw_median_call_gbs": robust,
                         "cpu_s_per_call": cpu})
        out["collectives"][name] = rows
    comm.destroy()
    if rank == 0:
        if args.out:
            Path(args.out).write_text(json.dumps(out))
            print(json.dumps({"out": args.out}))
        else:
            print(json.dumps(out))


if __name__ == "__main__":
    main()
