"""Benchmark 8: dlrun's collectives vs a bare torch.distributed loop, 2 local ranks over gloo.

One mpirun job (`bare_collectives.py`), started by the script dlrun generates for `dlrun run allreduce
--ranks-per-node 2 --threads 1` with only the rank command swapped (same mpirun flags and environment) and
under the allocator the harness runs with. In it, per collective (allreduce, broadcast, allgather,
reducescatter, alltoall) and size (1 MiB to 16 MiB, x2), the harness's own code (`Collective` from the
shipped harness file: its buffers and the call its timed loop repeats) and the plainest torch.distributed call
a user would write alternate call by call on the same process group, so that the load of a shared machine
hits both alike. Tried first and dropped: separate `dlrun run` jobs per round (ratios 0.2x to 3.9x from round
to round on a loaded 2-core machine), then alternating whole timed loops in one job (0.23x to 6.3x).

Goal (the issue): dlrun's bus bandwidth >= 0.95x the bare loop's at every size >= 1 MiB, per collective;
reported as the smallest, over the sizes, of the median per-round ratio, twice: with each side's mean time per
call (the harness's definition of busbw) and with its median time per call (robust to the calls that the
machine's other load preempts, which the mean over a round is not).
"""
from __future__ import annotations

import re
import shlex
import subprocess
import tempfile
from pathlib import Path

from common import (BENCH_DIR, DLRUN, Row, allocator_env, bench_env, harness_allocator, median, run_json, spread,
                    write_result)

RANKS = 2
COLLECTIVES = ("allreduce", "broadcast", "allgather", "reducescatter", "alltoall")
MIN_BYTES, MAX_BYTES = 1 << 20, 16 << 20
GOAL = 0.95


def bare_script(dry_run_script: str, args: list[str]) -> str:
    """dlrun's generated script with the harness command replaced by the side-by-side driver."""
    lines = dry_run_script.rstrip("\n").splitlines()
    last = lines[-1]
    match = re.search(r"(\S+)/harness_pytorch\.py .*$", last)
    if not last.startswith("exec mpirun ") or not match:
        raise RuntimeError(f"unexpected dlrun script for {RANKS} local ranks (no mpirun + harness line): {last}")
    lines[-1] = last[:match.start()] + shlex.join([str(BENCH_DIR / "bare_collectives.py"), *args])
    return "\n".join(lines) + "\n"


def measure(threads: int, repeats: int, log, quick: bool = False) -> list[Row]:
    iters, warmup = (6, 1) if quick else (40, 3)  # iters: call pairs per round
    rounds = 2 if quick else max(repeats, 5)
    max_bytes = 4 << 20 if quick else MAX_BYTES
    alloc_name, alloc_lib = harness_allocator()
    with tempfile.TemporaryDirectory(prefix="dlrun-bench-coll-") as tmp:
        home = Path(tmp)
        env = bench_env(1, DLRUN_HOME=str(home / "home"))
        dry = subprocess.run([DLRUN, "run", "allreduce", "--ranks-per-node", str(RANKS), "--threads", "1",
                              "--dry-run"], capture_output=True, text=True, env=env, check=True).stdout
        script = home / "collectives.sh"
        script.write_text(bare_script(dry, ["--benchmarks", ",".join(COLLECTIVES), "--min-bytes", str(MIN_BYTES),
                                            "--max-bytes", str(max_bytes), "--iters", str(iters), "--warmup",
                                            str(warmup), "--rounds", str(rounds), "--threads", "1"]))
        log(f"[8] collectives, {RANKS} local ranks (gloo), {MIN_BYTES >> 20}..{max_bytes >> 20} MiB, {warmup}+{iters} "
            f"call pairs per size and round, {rounds} rounds in one job: dlrun's harness vs a bare loop, call by call")
        run_dir = home / "run"
        run_dir.mkdir()
        data, wall = run_json(["bash", str(script)], env={**env, **allocator_env(alloc_name, alloc_lib),
                                                         "DLRUN_RUN_DIR": str(run_dir)}, timeout=1800)
    rows: list[Row] = []
    summary: dict = {}
    for name in COLLECTIVES:
        table = data["collectives"][name]
        ratio = {key: {row["bytes"]: median([h / b for h, b in zip(row[key]["harness"], row[key]["bare"])])
                       for row in table} for key in ("busbw_gbs", "busbw_median_call_gbs")}
        pooled = median([h / b for row in table for h, b in zip(row["busbw_gbs"]["harness"],
                                                                row["busbw_gbs"]["bare"])])
        summary[name] = {"ratio_mean_call_by_bytes": ratio["busbw_gbs"],
                         "ratio_median_call_by_bytes": ratio["busbw_median_call_gbs"], "pooled_mean_call": pooled}
        for key, what in (("busbw_gbs", "mean call"), ("busbw_median_call_gbs", "median call")):
            by_size = ratio[key]
            worst = min(by_size, key=by_size.get)
            sides = next(r[key] for r in table if r["bytes"] == worst)
            log(f"  {name} ({what}): " + ", ".join(f"{k / 2**20:g} MiB {v:.3f}x" for k, v in by_size.items()))
            rows.append(Row("8 collectives", f"{name} busbw >= 1 MiB ({what}), {RANKS} ranks gloo: dlrun harness "
                                             f"/ bare loop (worst size, {worst / 2**20:g} MiB)", by_size[worst],
                            goal=GOAL,
                            detail=f"median of per-round ratios, min over sizes; at {worst / 2**20:g} MiB harness "
                                   f"{spread(sides['harness'])} vs bare {spread(sides['bare'])} GB/s; all sizes: "
                                   + ", ".join(f"{k / 2**20:g} MiB {v:.3f}x" for k, v in by_size.items())
                                   + (f"; every round and size pooled {pooled:.3f}x" if key == "busbw_gbs" else "")))
    write_result("collectives", {"ranks": RANKS, "allocator": alloc_name, "wall_s": wall, "summary": summary,
                                 "raw": data})
    return rows
