"""Benchmark 5: dlrun's all-reduce bus bandwidth on 2 local ranks vs Open MPI's own MPI_Allreduce.

dlrun side: `dlrun run allreduce --ranks-per-node 2` (the harness's `--benchmark allreduce` over the run's
process group: gloo on CPU, the path DistributedDataParallel takes), read back from dlrun's result store.
MPI side: `mpi_allreduce.py` (mpi4py, in-place float32 MPI_Allreduce, the same sizes, iterations and
definitions) started by the script dlrun generated for that run, with only the rank command swapped, so
both sides get the same mpirun flags and environment. Alternated dlrun/MPI/MPI/dlrun.

Reported (no goal in the issue): busbw ratios dlrun / MPI at 64 MiB and 1 MiB, and the 8-byte latency.
"""
from __future__ import annotations

import json
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

from common import BENCH_DIR, DLRUN, Row, alternate, bench_env, latest_result, median, spread, write_result

STEPS, WARMUP = 20, 5
RANKS = 2


def _dlrun_args(steps: int, warmup: int) -> list[str]:
    return ["run", "allreduce", "--ranks-per-node", str(RANKS), "--threads", "1", "--steps", str(steps),
            "--warmup-steps", str(warmup)]


def mpi_script(dry_run_script: str, steps: int, warmup: int) -> str:
    """dlrun's generated script with the harness command replaced by the MPI_Allreduce reference."""
    lines = dry_run_script.rstrip("\n").splitlines()
    last = lines[-1]
    match = re.search(r"(\S+)/harness_pytorch\.py .*$", last)
    if not last.startswith("exec mpirun ") or not match:
        raise RuntimeError(f"unexpected dlrun script for {RANKS} local ranks (no mpirun + harness line): {last}")
    reference = shlex.join([str(BENCH_DIR / "mpi_allreduce.py"), "--min-bytes", "8", "--max-bytes",
                            str(64 * 1024 * 1024), "--iters", str(steps), "--warmup", str(warmup)])
    lines[-1] = last[:match.start()] + reference
    return "\n".join(lines) + "\n"


def measure(threads: int, repeats: int, log, quick: bool = False) -> list[Row]:
    steps, warmup = (5, 1) if quick else (STEPS, WARMUP)
    with tempfile.TemporaryDirectory(prefix="dlrun-bench-comm-") as tmp:
        home = Path(tmp)
        env = bench_env(1, DLRUN_HOME=str(home / "home"))
        dry = subprocess.run([DLRUN, *_dlrun_args(steps, warmup), "--dry-run"], capture_output=True, text=True,
                             env=env, check=True).stdout
        script = home / "mpi_allreduce.sh"
        script.write_text(mpi_script(dry, steps, warmup))
        runs: dict[str, list[list[dict]]] = {"dlrun": [], "mpi": []}
        info: dict = {}

        def via_dlrun() -> float:
            proc = subprocess.run([DLRUN, *_dlrun_args(steps, warmup)], capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                raise RuntimeError(f"dlrun run allreduce exited {proc.returncode}: {proc.stderr.strip()[-600:]}")
            result = latest_result(home / "home")[1]["extra"]
            info["dlrun"] = {k: result.get(k) for k in ("backend", "framework_version", "allocator", "world_size")}
            runs["dlrun"].append(result["sizes"])
            return result["sizes"][-1]["busbw_gbs"]

        def via_mpi() -> float:
            run_dir = home / "mpi-run"
            run_dir.mkdir(exist_ok=True)
            proc = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                                  env={**env, "DLRUN_RUN_DIR": str(run_dir)})
            if proc.returncode != 0:
                raise RuntimeError(f"MPI_Allreduce reference exited {proc.returncode}: {proc.stderr.strip()[-600:]}")
            data = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
            info["mpi"] = {"library": data["library"], "world_size": data["world_size"]}
            runs["mpi"].append(data["sizes"])
            return data["sizes"][-1]["busbw_gbs"]

        log(f"[5] all-reduce, {RANKS} local ranks, 8 B..64 MiB, {warmup}+{steps} iterations per size: "
            "dlrun (torch.distributed) vs MPI_Allreduce (mpi4py), same mpirun line")
        samples = alternate({"dlrun": via_dlrun, "mpi": via_mpi}, repeats, log)

    def per_round(nbytes: int, key: str) -> tuple[list[float], list[float]]:
        pick = lambda sizes: next(s[key] for s in sizes if s["bytes"] == nbytes)  # noqa: E731
        return [pick(r) for r in runs["dlrun"]], [pick(r) for r in runs["mpi"]]

    wrong = sum(s["wrong"] for side in runs.values() for r in side for s in r)
    rows = []
    for nbytes, label in ((64 * 1024 * 1024, "64 MiB"), (1024 * 1024, "1 MiB")):
        d, m = per_round(nbytes, "busbw_gbs")
        rows.append(Row("5 communication", f"all-reduce busbw {label}, {RANKS} ranks: dlrun ({info['dlrun']['backend']}) "
                                           "/ MPI_Allreduce", median([a / b for a, b in zip(d, m)]),
                        detail=f"median of per-round ratios; dlrun {spread(d)} vs MPI {spread(m)} GB/s",
                        status="FAIL" if wrong else ""))
    d, m = per_round(8, "time_us")
    rows.append(Row("5 communication", f"all-reduce 8 B speed, {RANKS} ranks: dlrun / MPI_Allreduce (inverse time)",
                    median([b / a for a, b in zip(d, m)]),
                    detail=f"dlrun {spread(d)} vs MPI {spread(m)} us per all-reduce"))
    write_result("comm", {"ranks": RANKS, "iterations": steps, "warmup_iterations": warmup, "repeats": repeats,
                          "samples_busbw_64MiB": samples, "runs": runs, "info": info, "wrong_elements": wrong})
    return rows
