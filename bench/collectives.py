"""Benchmark 8: dlrun's collectives vs a bare torch.distributed loop, 2 local ranks over gloo.

One mpirun job (`bare_collectives.py`), started by the script dlrun generates for `dlrun run allreduce
--ranks-per-node 2 --threads 1` with only the rank command swapped (same mpirun flags and environment) and
under the allocator the harness runs with. In it, per collective (allreduce, broadcast, allgather,
reducescatter, alltoall) and size (1 MiB to 16 MiB, x2), the harness's own code (`Collective` from the
shipped harness file: its buffers and the call its timed loop repeats) and the plainest torch.distributed call
a user would write alternate call by call on the same process group, so that the load of a shared machine
hits both alike. Tried first and dropped: separate `dlrun run` jobs per round (ratios 0.2x to 3.9x from round
to round on a loaded 2-core machine), then alternating whole timed loops in one job (0.23x to 6.3x).

Goal (P7): dlrun's bus bandwidth >= 0.95x the bare loop's at every size >= 1 MiB, per collective. Per size,
the per-round ratios (harness / bare, each side's mean time per call: the harness's definition of busbw) give
a geometric mean with a 95 % t-interval on the log scale; a size PASSes when its whole interval is >= 0.95,
MISSes when it is all below, and is INCONCLUSIVE otherwise; a collective's verdict is its worst size's.
Reported beside it: the same with each side's median time per call (robust to the calls that other load
preempts), and CPU seconds per call (this process, gloo's threads included), which a shared machine's other
load changes less than wall time.
"""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

from common import (BENCH_DIR, DLRUN, Row, allocator_env, bench_env, harness_allocator, interval_text, median,
                    ratio_interval, run_json, spread, verdict, write_result)

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
    rounds = 2 if quick else max(repeats, 8)
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
                                            str(warmup), "--rounds", str(rounds), "--threads", "1",
                                            "--out", str(home / "collectives.json")]))
        log(f"[8] collectives, {RANKS} local ranks (gloo), {MIN_BYTES >> 20}..{max_bytes >> 20} MiB, {warmup}+{iters} "
            f"call pairs per size and round, {rounds} rounds in one job: dlrun's harness vs a bare loop, call by call")
        run_dir = home / "run"
        run_dir.mkdir()
        written, wall = run_json(["bash", str(script)], env={**env, **allocator_env(alloc_name, alloc_lib),
                                                            "DLRUN_RUN_DIR": str(run_dir)}, timeout=3600)
        data = json.loads(Path(written["out"]).read_text())
    rows: list[Row] = []
    summary: dict = {}
    for name in COLLECTIVES:
        summary[name] = _collective_rows(name, data["collectives"][name], rows, log)
    write_result("collectives", {"ranks": RANKS, "allocator": alloc_name, "wall_s": wall, "summary": summary,
                                 "raw": data})
    return rows


#: Each side's per-round figure: busbw from its mean and its median time per call (higher is better), and CPU
#: seconds per call (lower is better).
STATISTICS = (("busbw_gbs", "mean call", False), ("busbw_median_call_gbs", "median call", False),
              ("cpu_s_per_call", "CPU per call", True))


def _collective_rows(name: str, table: list[dict], rows: list[Row], log) -> dict:
    """One row per statistic for collective `name`: the worst size's interval and the verdict over sizes."""
    summary: dict = {}
    for key, what, cost in STATISTICS:
        if key not in table[0]:
            continue
        ratios = {row["bytes"]: [(b / h if cost else h / b) for h, b in zip(row[key]["harness"], row[key]["bare"])
                                 if h > 0 and b > 0] for row in table}
        by_size = {size: ratio_interval(values) for size, values in ratios.items()}
        verdicts = {size: verdict(iv, GOAL) for size, iv in by_size.items()}
        worst = min(by_size, key=lambda size: by_size[size]["ratio"] or 0.0)
        overall = "MISS" if "MISS" in verdicts.values() else "PASS" if set(verdicts.values()) == {"PASS"} \
            else "INCONCLUSIVE"
        sides = next(r[key] for r in table if r["bytes"] == worst)
        each = ", ".join(f"{k / 2**20:g} MiB {interval_text(v)} {verdicts[k]}" for k, v in by_size.items())
        log(f"  {name} ({what}): {each}")
        summary[key] = {"by_size": {str(k): v for k, v in by_size.items()}, "verdicts": verdicts, "overall": overall}
        pooled = _pooled(ratios)
        summary[key]["pooled"] = pooled
        rows.append(Row("8 collectives (P7)", f"{name} >= 1 MiB ({what}), every size pooled", pooled["ratio"],
                        goal=GOAL, status=verdict(pooled, GOAL) if pooled["sizes_differ_p"] >= 0.05 else "INCONCLUSIVE",
                        detail=f"{interval_text(pooled)}; one-way ANOVA of the log ratios over the "
                               f"{len(ratios)} sizes: p = {pooled['sizes_differ_p']:.2f} (below 0.05 the sizes "
                               "differ and pooling does not answer for each)", extra={"pooled": pooled}))
        rows.append(Row("8 collectives (P7)", f"{name} >= 1 MiB ({what}), {RANKS} ranks gloo: dlrun harness / bare "
                                              f"loop (worst size, {worst / 2**20:g} MiB)", by_size[worst]["ratio"],
                        goal=GOAL, status=overall,
                        detail=f"worst size {interval_text(by_size[worst])}; harness {spread(sides['harness'])} vs "
                               f"bare {spread(sides['bare'])} {'CPU s' if cost else 'GB/s'}; every size: {each}",
                        extra={"by_size": summary[key]["by_size"], "verdicts": verdicts}))
    return summary


def _pooled(by_size: dict[int, list[float]]) -> dict:
    """Every size's per-round ratios pooled into one interval, with the p-value of a one-way ANOVA on the log
    ratios across sizes: where the sizes do not differ (the harness calls the same function on every size), the
    pooled interval speaks for each size with the power of all rounds together."""
    import math

    from scipy import stats

    logs = [[math.log(r) for r in ratios] for ratios in by_size.values() if len(ratios) >= 2]
    interval = ratio_interval([r for ratios in by_size.values() for r in ratios])
    p = float(stats.f_oneway(*logs).pvalue) if len(logs) >= 2 else float("nan")
    return {**interval, "sizes_differ_p": p if p == p else 1.0}
