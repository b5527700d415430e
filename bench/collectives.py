"""Benchmark 8: dlrun's collectives vs a bare torch.distributed loop, 2 local ranks over gloo.

dlrun side: `dlrun run COLLECTIVE --ranks-per-node 2` for allreduce, broadcast, allgather, reducescatter and
alltoall (the harness's --benchmark: timed loop, then the per-size value check), read back from dlrun's store.
Bare side: `bare_collectives.py` (the plainest loop: buffers, warm-up, barrier, timed calls, nothing else),
started by the script dlrun generated for the same run with only the rank command swapped (same mpirun flags,
environment and threads) and under the allocator the harness runs with. Both use the sizes of the goal,
1 MiB to 16 MiB (x2), through a site catalog that overrides the built-in workloads' sizes only. Rounds
alternate dlrun/bare per collective (A B, B A, ...).

Goal (the issue): dlrun's bus bandwidth >= 0.95x the bare loop's at every size >= 1 MiB, per collective;
reported as the smallest, over the sizes, of the median per-round ratio.
"""
from __future__ import annotations

import re
import shlex
import subprocess
import tempfile
from pathlib import Path

import yaml
from common import (BENCH_DIR, DLRUN, PYTHON, REPO_ROOT, Row, allocator_env, alternate, bench_env,
                    harness_allocator, latest_result, median, run_json, spread, write_result)

RANKS = 2
COLLECTIVES = ("allreduce", "broadcast", "allgather", "reducescatter", "alltoall")
MIN_BYTES, MAX_BYTES = 1 << 20, 16 << 20
GOAL = 0.95


def _site(root: Path, max_bytes: int) -> Path:
    builtin = yaml.safe_load((REPO_ROOT / "recipes" / "workloads" / "comm.yaml").read_text())
    entries = [dict(e, min_bytes=MIN_BYTES, max_bytes=max_bytes, size_factor=2)
               for e in builtin if e["name"] in COLLECTIVES]
    (root / "workloads").mkdir(parents=True)
    (root / "workloads" / "bench.yaml").write_text(yaml.safe_dump(entries))
    return root


def _args(name: str, steps: int, warmup: int) -> list[str]:
    return ["run", name, "--ranks-per-node", str(RANKS), "--threads", "1", "--steps", str(steps),
            "--warmup-steps", str(warmup)]


def bare_script(dry_run_script: str, name: str, steps: int, warmup: int, max_bytes: int) -> str:
    """dlrun's generated script with the harness command replaced by the bare loop."""
    lines = dry_run_script.rstrip("\n").splitlines()
    last = lines[-1]
    match = re.search(r"(\S+)/harness_pytorch\.py .*$", last)
    if not last.startswith("exec mpirun ") or not match:
        raise RuntimeError(f"unexpected dlrun script for {RANKS} local ranks (no mpirun + harness line): {last}")
    bare = shlex.join([PYTHON, str(BENCH_DIR / "bare_collectives.py"), "--benchmark", name, "--min-bytes",
                       str(MIN_BYTES), "--max-bytes", str(max_bytes), "--iters", str(steps), "--warmup",
                       str(warmup), "--threads", "1"])
    lines[-1] = last[:match.start()] + bare
    return "\n".join(lines) + "\n"


def measure(threads: int, repeats: int, log, quick: bool = False) -> list[Row]:
    steps, warmup = (5, 1) if quick else (10, 2)
    max_bytes = 4 << 20 if quick else MAX_BYTES
    alloc_name, alloc_lib = harness_allocator()
    rows: list[Row] = []
    record: dict = {"ranks": RANKS, "iterations": steps, "warmup_iterations": warmup, "repeats": repeats,
                    "allocator": alloc_name, "collectives": {}}
    with tempfile.TemporaryDirectory(prefix="dlrun-bench-coll-") as tmp:
        home = Path(tmp)
        env = bench_env(1, DLRUN_HOME=str(home / "home"), DLRUN_PATH=str(_site(home / "site", max_bytes)))
        bare_env = {**env, **allocator_env(alloc_name, alloc_lib)}
        log(f"[8] collectives, {RANKS} local ranks (gloo), {MIN_BYTES >> 20}..{max_bytes >> 20} MiB, "
            f"{warmup}+{steps} iterations per size: dlrun vs a bare torch.distributed loop, same mpirun line")
        for name in COLLECTIVES:
            dry = subprocess.run([DLRUN, *_args(name, steps, warmup), "--dry-run"], capture_output=True, text=True,
                                 env=env, check=True).stdout
            script = home / f"bare_{name}.sh"
            script.write_text(bare_script(dry, name, steps, warmup, max_bytes))
            runs: dict[str, list[list[dict]]] = {"dlrun": [], "bare": []}

            def via_dlrun() -> float:
                proc = subprocess.run([DLRUN, *_args(name, steps, warmup)], capture_output=True, text=True, env=env)
                if proc.returncode != 0:
                    raise RuntimeError(f"dlrun run {name} exited {proc.returncode}: {proc.stderr.strip()[-600:]}")
                extra = latest_result(home / "home")[1]["extra"]
                runs["dlrun"].append(extra["sizes"])
                return extra["sizes"][-1]["busbw_gbs"]

            def via_bare() -> float:
                run_dir = home / f"bare-{name}"
                run_dir.mkdir(exist_ok=True)
                data, _ = run_json(["bash", str(script)], env={**bare_env, "DLRUN_RUN_DIR": str(run_dir)})
                runs["bare"].append(data["sizes"])
                return data["sizes"][-1]["busbw_gbs"]

            log(f"  {name}")
            alternate({"dlrun": via_dlrun, "bare": via_bare}, repeats, log)
            sizes = [s["bytes"] for s in runs["dlrun"][0]]
            if sizes != [s["bytes"] for s in runs["bare"][0]]:
                raise RuntimeError(f"{name}: dlrun sizes {sizes} differ from the bare loop's")
            ratios = {}
            for i, nbytes in enumerate(sizes):
                per_round = [d[i]["busbw_gbs"] / b[i]["busbw_gbs"] for d, b in zip(runs["dlrun"], runs["bare"])]
                ratios[nbytes] = median(per_round)
            worst = min(ratios, key=ratios.get)
            d = [r[sizes.index(worst)]["busbw_gbs"] for r in runs["dlrun"]]
            b = [r[sizes.index(worst)]["busbw_gbs"] for r in runs["bare"]]
            wrong = sum(s["wrong"] for r in runs["dlrun"] for s in r)
            rows.append(Row("8 collectives", f"{name} busbw >= 1 MiB, {RANKS} ranks gloo: dlrun / bare loop "
                                             f"(worst size, {worst >> 20} MiB)", ratios[worst], goal=GOAL,
                            detail=f"median of per-round ratios per size, min over sizes; at {worst >> 20} MiB "
                                   f"dlrun {spread(d)} vs bare {spread(b)} GB/s; all sizes: "
                                   + ", ".join(f"{k >> 20} MiB {v:.3f}x" for k, v in ratios.items()),
                            status="FAIL" if wrong else ""))
            record["collectives"][name] = {"ratios_by_bytes": ratios, "runs": runs, "wrong_elements": wrong}
    write_result("collectives", record)
    return rows
