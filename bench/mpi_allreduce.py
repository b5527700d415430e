"""The yardstick for dlrun's all-reduce benchmark: Open MPI's own MPI_Allreduce through mpi4py.

Same definition as the harness's `--benchmark allreduce`: in-place float32 sum over the same message
sizes, `--iters` timed after `--warmup` untimed calls per size, each rank's mean time per call, the
maximum over ranks, busbw = bytes / time * 2 (n - 1) / n. Run it under mpirun; rank 0 prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
from mpi4py import MPI


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--min-bytes", type=int, default=8)
    p.add_argument("--max-bytes", type=int, default=64 * 1024 * 1024)
    p.add_argument("--size-factor", type=int, default=2)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    n, rank = comm.size, comm.rank
    rows = []
    size = args.min_bytes
    while size <= args.max_bytes:
        count = max(size // 4, 1)
        buf = np.zeros(count, dtype=np.float32)
        for _ in range(args.warmup):
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        comm.Barrier()
        start = time.perf_counter()
        for _ in range(args.iters):
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        local = (time.perf_counter() - start) / args.iters
        buf.fill(rank + 1.0)
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        wrong = comm.allreduce(int(np.count_nonzero(buf != n * (n + 1) / 2.0)), op=MPI.SUM)
        seconds = comm.allreduce(local, op=MPI.MAX)
        algbw = count * 4 / seconds / 1e9
        rows.append({"bytes": count * 4, "count": count, "time_us": seconds * 1e6, "algbw_gbs": algbw,
                     "busbw_gbs": algbw * 2.0 * (n - 1) / n, "wrong": wrong})
        size *= args.size_factor
    if rank == 0:
        print(json.dumps({"library": MPI.Get_library_version().splitlines()[0].strip(), "world_size": n,
                          "iterations": args.iters, "warmup_iterations": args.warmup, "sizes": rows}))


if __name__ == "__main__":
    main()
