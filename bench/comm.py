"""Benchmark 5: all-reduce bus bandwidth on 2 local ranks vs Open MPI's own MPI_Allreduce.

dlrun has no communication benchmark yet (no all-reduce harness mode, no nccl-tests parser), so there is
nothing of dlrun's to compare: the row says so instead of timing something dlrun does not run.
"""
from __future__ import annotations

from common import Row


def measure(threads: int, repeats: int, log, quick: bool = False) -> list[Row]:
    log("[5] not applicable yet: dlrun has no communication benchmark")
    return [Row("5 communication", "all-reduce busbw, 2 ranks: dlrun / MPI_Allreduce", None, status="N/A",
                detail="not applicable yet: dlrun has no communication benchmark (busbw = algbw*2(n-1)/n "
                       "will be compared with mpi4py's MPI_Allreduce once it has)")]
