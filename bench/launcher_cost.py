"""Benchmark 3: what the launcher itself costs - start-up, rendering a large job, querying a large store.

Times are wall seconds of fresh `dlrun` processes (median of repeats), next to `python -c pass` (the floor
any Python CLI pays), with dlrun's modules byte-compiled first as an install leaves them. The 512-node x
8-rank Slurm + Singularity + InfiniBand render goes through the real CLI (`dlrun run ... --dry-run`) with a
site catalog entry of 512 DGX H100-class nodes; the 100,000-result store is bulk-inserted with the store's
own schema and listed with `dlrun results list`.
"""
from __future__ import annotations

import json
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from common import (DLRUN, PYTHON, REPO_ROOT, Row, bench_env, compile_launcher, median, spread, wall_time,
                    write_result)

HELP_GOAL = 0.20
RENDER_GOAL = 0.5
QUERY_GOAL = 0.5
STORE_RUNS = 100_000
NODES, RANKS = 512, 8


def _timed(argv, repeats, env=None):
    wall_time(argv, env)  # warm the page cache; not counted
    return [wall_time(argv, env) for _ in range(repeats)]


def _write_big_system(site: Path) -> str | None:
    """A 512-node, 8-GPU, Slurm + IB system entry for the site catalog (copied from dgx-h100, scaled up)."""
    import yaml

    sys.path.insert(0, str(REPO_ROOT / "launcher"))
    from dlrun.yamlfile import load_yaml  # the bounded reader dlrun uses for every YAML file

    source = REPO_ROOT / "recipes" / "systems" / "dgx-h100.yaml"
    if not source.exists():
        return None
    data = load_yaml(source, "system file")
    data.update(name="bench-512x8", nodes=NODES, scheduler="slurm", runtime="singularity",
                description="benchmark only: dgx-h100 scaled to 512 nodes")
    (site / "systems").mkdir(parents=True, exist_ok=True)
    (site / "systems" / "bench-512x8.yaml").write_text(yaml.safe_dump(data))
    return data["name"]


def fill_store(path: Path, runs: int) -> float:
    """Bulk-insert `runs` finished runs with one throughput result each, via the store's schema."""
    sys.path.insert(0, str(REPO_ROOT / "launcher"))
    from dlrun.results.store import RUN_COLUMNS, Store

    start = time.perf_counter()
    with Store(path).connect():
        pass  # creates the schema (and any indexes) exactly as dlrun does
    conn = sqlite3.connect(path)
    rng = random.Random(7)
    workloads = ["resnet50", "resnet18", "vgg16", "alexnet", "inception3"]
    systems = ["localhost", "dgx-h100", "txgaia", "summitdev", "aws-p3dn"]
    plan = json.dumps({"workload": "resnet50", "nodes": 1, "note": "synthetic benchmark row"})
    prov = json.dumps({"dlrun_git_commit": None, "hostname": "bench"})
    run_rows, res_rows = [], []
    t0 = 1.7e9
    for i in range(runs):
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0 + i * 37))
        rid = f"{created[:10].replace('-', '')}-{i:06d}"
        w, s = rng.choice(workloads), rng.choice(systems)
        row = {c: None for c in RUN_COLUMNS}
        row.update(id=rid, created_at=created, finished_at=created, status="ok", workload=w, model=w, image="host",
                   system=s, scheduler="local", launcher="none", runtime="host", fabric="tcp", nodes=1,
                   ranks_per_node=1, world_size=1, batch_size=16, precision="fp32", run_dir=f"/runs/{rid}")
        run_rows.append([row[c] for c in RUN_COLUMNS] + [plan, prov])
        value = rng.uniform(5, 3000)
        res_rows.append((rid, "throughput", value, "images/sec",
                         json.dumps({"metric": "throughput", "value": value, "unit": "images/sec"})))
    cols = ", ".join((*RUN_COLUMNS, "plan", "provenance"))
    marks = ", ".join("?" * (len(RUN_COLUMNS) + 2))
    with conn:
        conn.executemany(f"INSERT INTO runs ({cols}) VALUES ({marks})", run_rows)
        conn.executemany("INSERT INTO results (run_id, metric, value, unit, data) VALUES (?, ?, ?, ?, ?)", res_rows)
    conn.execute("ANALYZE")
    conn.close()
    return time.perf_counter() - start


def measure(threads: int, repeats: int, log, quick: bool = False) -> list[Row]:
    n = 5 if quick else 11
    rows: list[Row] = []
    record: dict = {"repeats": n, "launcher_bytecode_compiled": compile_launcher()}
    env = bench_env(threads)
    log(f"[3] start-up: python -c pass, dlrun --help, dlrun run resnet50 --dry-run ({n} each)")
    floor = _timed([PYTHON, "-c", "pass"], n, env)
    helps = _timed([DLRUN, "--help"], n, env)
    dry = _timed([DLRUN, "run", "resnet50", "--dry-run"], n, env)
    record.update(python_floor_s=floor, help_s=helps, dry_run_s=dry)
    rows.append(Row("3 launcher cost", "dlrun --help", median(helps), unit="s", goal=HELP_GOAL, goal_op="<=",
                    detail=f"{spread(helps)} s; python -c pass {median(floor):.3f} s"))
    rows.append(Row("3 launcher cost", "dlrun run resnet50 --dry-run", median(dry), unit="s",
                    detail=f"{spread(dry)} s; python -c pass {median(floor):.3f} s"))

    with tempfile.TemporaryDirectory(prefix="dlrun-bench-") as tmp:
        site = Path(tmp) / "site"
        name = _write_big_system(site)
        big_env = bench_env(threads, DLRUN_PATH=str(site), DLRUN_HOME=str(Path(tmp) / "home"))
        argv = [DLRUN, "run", "resnet50", "--system", str(name), "--nodes", str(NODES), "--ranks-per-node",
                str(RANKS), "--scheduler", "slurm", "--runtime", "singularity", "--fabric", "ib", "--dry-run"]
        log(f"[3] render {NODES} nodes x {RANKS} ranks, Slurm + Singularity + InfiniBand")
        try:
            if name is None:
                raise RuntimeError("no dgx-h100 system recipe to scale up")
            renders = _timed(argv, n, big_env)
            script = __import__("subprocess").run(argv, capture_output=True, text=True, env=big_env).stdout
            record.update(render_s=renders, render_script_bytes=len(script))
            rows.append(Row("3 launcher cost", f"render {NODES}x{RANKS} Slurm+Singularity+IB (--dry-run)",
                            median(renders), unit="s", goal=RENDER_GOAL, goal_op="<=",
                            detail=f"{spread(renders)} s; script {len(script)} bytes"))
        except Exception as exc:  # the scheduler/runtime/fabric may not have landed yet
            reason = " ".join(str(exc).split())[-200:]
            record["render_error"] = reason
            rows.append(Row("3 launcher cost", f"render {NODES}x{RANKS} Slurm+Singularity+IB", None, unit="s",
                            goal=RENDER_GOAL, goal_op="<=", status="N/A",
                            detail=f"not available yet: {reason}"))

        home = Path(tmp) / "store"
        home.mkdir()
        log(f"[3] store of {STORE_RUNS} results: fill, then dlrun results list")
        fill_s = fill_store(home / "results.sqlite", STORE_RUNS)
        qenv = bench_env(threads, DLRUN_HOME=str(home))
        lists = _timed([DLRUN, "results", "list"], n, qenv)
        json_all = _timed([DLRUN, "results", "list", "--limit", "0", "--json"], 3, qenv)
        record.update(store_runs=STORE_RUNS, store_fill_s=fill_s, list_s=lists, list_all_json_s=json_all)
        rows.append(Row("3 launcher cost", f"dlrun results list ({STORE_RUNS:,} runs, newest 50)", median(lists),
                        unit="s", goal=QUERY_GOAL, goal_op="<=", detail=f"{spread(lists)} s"))
        rows.append(Row("3 launcher cost", f"dlrun results list --limit 0 --json (all {STORE_RUNS:,})",
                        median(json_all), unit="s", detail=f"{spread(json_all)} s (informational)"))
    write_result("launcher_cost", record)
    return rows
