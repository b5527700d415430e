"""Benchmark 7: `dlrun compare`, `dlrun report` and `dlrun results list` with filters over a store of 100,000
results (or of DLRUN_BENCH_STORE_RUNS: the issue's million).

The store is filled through the store's own schema with rows shaped as `dlrun run` stores them: 5 workloads
x 5 systems x 4 device counts x 2 images = 200 configurations of 500 repeats, each run with its
comparability key (computed by `dlrun.results.key` once per configuration), its system's machine (one
fingerprint per system) and an `ok` quality verdict, written in chunks (memory bounded whatever the count);
the store's aggregates are then made from the stored rows, as an upgrade of an older store makes them. Each command runs as a user
runs it (a fresh `dlrun` process); the first call, which also counts the models' multiply-adds for the
efficiency columns (PyTorch import, cached afterwards), is reported on its own and not in the median.
`dlrun report` writes its page and two PNG plots into a folder of the temporary directory (`{out}`), replaced
by each call.

`DLRUN_BENCH_STORE_BACKEND=postgresql` runs the same on a PostgreSQL store: a server of Debian's `postgresql` is
started on loopback for the benchmark (tests/pg_cluster.py, as the tests start theirs), the rows are written
through the store's own PostgreSQL connection, and the commands open it through `store:` in config.yaml.
"""
from __future__ import annotations

import itertools
import json
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

from common import DLRUN, REPO_ROOT, Row, bench_env, median, spread, write_result

GOAL = 2.0
#: Runs in the store: 100,000, or DLRUN_BENCH_STORE_RUNS (benchmark 7 at a million: 1000000).
STORE_RUNS = int(os.environ.get("DLRUN_BENCH_STORE_RUNS", "100000"))
#: The store's backend: sqlite (the embedded default) or postgresql (a server started for the benchmark).
BACKEND = os.environ.get("DLRUN_BENCH_STORE_BACKEND", "sqlite")
_PER = STORE_RUNS // 200  # runs per configuration
WORKLOADS = {"resnet50": "resnet50_v1.5", "resnet18": "resnet18", "alexnet": "alexnet", "vgg16": "vgg16",
             "inception3": "inception3"}
SYSTEMS = ["dgx2", "dgx1v", "rtx-ts4", "ac922", "aws-p3dn"]
DEVICES = [1, 2, 4, 8]
IMAGES = {"pytorch-a": ("sha256:" + "a" * 64, "2.12.0"), "pytorch-b": ("sha256:" + "b" * 64, "2.13.0")}
#: Each system's machine (its hardware fingerprint), and timed steps nothing disturbed (an `ok` verdict).
MACHINES = {system: {"cpu": f"CPU of {system}", "cpu_id": f"GenuineIntel family 6 model {80 + i} stepping 4",
                     "isa": "x86-64-v4", "sockets": 2, "cores_per_socket": 20 + i, "memory_gib": 512,
                     "gpu": f"GPU of {system}", "gpu_count": 8, "gpu_memory_gib": 32, "driver": "535.104.05",
                     "device": "cuda", "cuda": "12.2", "cudnn": "8902", "nccl": "2.18.5", "nodes": 1,
                     "node_from": "job"} for i, system in enumerate(SYSTEMS)}
CALM = {"window_s": 30.0, "steps": 100, "step_rate_spread": 0.01,
        "hosts": {"n1": {"others_share": 0.01, "node_cpus": 40, "threads_per_rank": 5, "cpus_per_rank": 5}}}
#: The harness's speed knobs as a run on PyTorch's own ops records them (the key's code path `reference`).
KNOBS = {name: {"value": "off", "source": "default"}
         for name in ("fused_optimizer", "fused_bn_relu", "channels_last", "compile")}
COMMANDS = {
    f"compare --by system ({_PER * 20:,} runs, Table III shape)":
        ["compare", "--workload", "resnet50", "--image", "pytorch-b", "--by", "system", "--baseline", "dgx2"],
    f"compare --by devices ({_PER * 4:,} runs, efficiency columns)":
        ["compare", "--workload", "resnet50", "--system", "dgx2", "--image", "pytorch-b", "--by", "devices"],
    f"compare --by image ({_PER * 8:,} runs, Welch per row)":
        ["compare", "--workload", "resnet50", "--system", "dgx2", "--by", "image", "--baseline", "pytorch-a"],
    f"compare, all {STORE_RUNS:,} runs (statistics per configuration)": ["compare", "--json"],
    f"report --workload --image ({_PER * 20:,} runs: 5 systems x 4 device counts, page + 2 PNGs)":
        ["report", "--workload", "resnet50", "--image", "pytorch-b", "--out", "{out}"],
    f"report --workload ({_PER * 40:,} runs, two images: not like-for-like)":
        ["report", "--workload", "resnet50", "--out", "{out}"],
    "results list --workload --system --since (newest 50)":
        ["results", "list", "--workload", "resnet50", "--system", "dgx2", "--since", "2026-01-02"],
}


def _record(i: int, workload: str, system: str, devices: int, image: str) -> tuple[dict, dict]:
    digest, version = IMAGES[image]
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1.767e9 + i * 7))
    model = WORKLOADS[workload]
    run = {"id": f"{created[:10].replace('-', '')}-{i:06d}", "created_at": created, "finished_at": created,
           "status": "ok", "workload": workload, "model": model, "image": image, "image_digest": digest,
           "system": system, "scheduler": "local", "launcher": "mpirun", "runtime": "docker", "fabric": "tcp",
           "nodes": 1, "ranks_per_node": devices, "world_size": devices, "batch_size": 64, "precision": "fp32",
           "run_dir": None, "site": "bench", "origin": "local", "experiment": None, "point": None,
           "plan": {"workload": {"name": workload, "kind": "cnn-training", "framework": "pytorch",
                                 "dataset": "synthetic", "model": model},
                    "image": {"name": image, "kind": "container", "framework": "pytorch", "framework_version": version},
                    "global_batch_size": 64 * devices, "env": {}, "note": "synthetic benchmark row"},
           "provenance": {"hostname": "bench"}, "fingerprint": MACHINES[system]}
    row = {"metric": "throughput", "unit": "images/sec", "model": model,
           "extra": {"framework": "pytorch", "framework_version": version, "global_batch_size": 64 * devices,
                     "quality": CALM, "knobs": KNOBS}}
    return run, row


def _rows(runs: int, keys: dict) -> Iterator[tuple[list, tuple]]:
    """(runs row, results row) for each of `runs` runs, made one at a time."""
    import random

    from dlrun.results.key import key_from_run, key_hash, key_json
    from dlrun.results.quality import run_quality
    from dlrun.results.store import RUN_COLUMNS

    configs = [(w, s, d, im) for w in WORKLOADS for s in SYSTEMS for d in DEVICES for im in IMAGES]
    rng = random.Random(11)
    for i in range(runs):
        config = configs[i % len(configs)]
        run, row = _record(i, *config)
        if config not in keys:
            key = key_from_run(run, [row])
            quality = run_quality("ok", [row])
            keys[config] = (key_json(key), key_hash(key), json.dumps(quality), quality["verdict"])
        run["key"], run["key_hash"], run["quality"], run["verdict"] = keys[config]
        base = 100.0 * (1 + SYSTEMS.index(config[1])) * config[2] ** 0.9 * (0.97 if config[3] == "pytorch-a" else 1)
        value = rng.gauss(base, base * 0.02)
        yield ([run[c] for c in RUN_COLUMNS] + [run["key"], json.dumps(run["plan"]), json.dumps(run["provenance"]),
                                                json.dumps(run["fingerprint"]), run["quality"]],
               (run["id"], "throughput", value, "images/sec", json.dumps({**row, "value": value})))


def _write(conn, parts: Iterator[list], cols: str, n_cols: int, commit) -> None:
    for part in parts:
        conn.executemany(f"INSERT INTO runs ({cols}) VALUES ({', '.join('?' * n_cols)})", [run for run, _ in part])
        conn.executemany("INSERT INTO results (run_id, metric, value, unit, data) VALUES (?, ?, ?, ?, ?)",
                         [result for _, result in part])
        commit()


def fill_store(where: Path | str, runs: int, chunk: int = 20_000) -> dict[str, float]:
    """Fill the store (a SQLite file, or a PostgreSQL store's URL), streamed (`chunk` runs at a time: memory stays
    bounded whatever `runs`), then make its aggregates from the stored rows as a store upgrade does
    (dlrun.results.store.samples.rebuild); the seconds of each step."""
    sys.path.insert(0, str(REPO_ROOT / "launcher"))
    from dlrun.results.store import PRIMARY_METRICS, RUN_COLUMNS, Store
    from dlrun.results.store import samples

    start = time.perf_counter()
    store = Store(where)
    cols = ", ".join((*RUN_COLUMNS, "key", "plan", "provenance", "fingerprint", "quality"))
    made = _rows(runs, {})
    parts = iter(lambda: list(itertools.islice(made, chunk)), [])
    with ExitStack() as stack:
        if isinstance(where, Path):
            with store.connect():
                pass  # the schema (and its indexes) exactly as dlrun creates it
            conn = sqlite3.connect(where)
            stack.callback(conn.close)
            _write(conn, parts, cols, len(RUN_COLUMNS) + 5, conn.commit)
            rows_s = time.perf_counter() - start
            with conn:
                samples.rebuild(conn, PRIMARY_METRICS)
            conn.execute("ANALYZE")
        else:  # the store's own connection (its SQL translated), one transaction per chunk
            conn = stack.enter_context(store.connect())
            conn.execute("BEGIN")
            _write(conn, parts, cols, len(RUN_COLUMNS) + 5, lambda: (conn.execute("COMMIT"), conn.execute("BEGIN")))
            conn.execute("COMMIT")
            rows_s = time.perf_counter() - start
            conn.execute("BEGIN")
            samples.rebuild(conn, PRIMARY_METRICS)
            conn.execute("COMMIT")
            # what the server's autovacuum does soon after a million inserts, done before the timing starts (the
            # statistics, and the visibility map that index-only scans need), instead of while it runs
            conn.execute("VACUUM ANALYZE")
    aggregates_s = time.perf_counter() - start - rows_s
    return {"rows_s": rows_s, "aggregates_s": aggregates_s, "total_s": time.perf_counter() - start,
            "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one command; CPU time (user + system) tells a loaded machine from a slow command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _store(stack: ExitStack, home: Path) -> Path | str:
    """Where the benchmark's store is: the SQLite file under its DLRUN_HOME, or a database on a PostgreSQL server
    started for it (named by `store:` in its own config.yaml, beside DLRUN_HOME)."""
    if BACKEND == "sqlite":
        return home / "results.sqlite"
    if BACKEND != "postgresql":
        raise SystemExit(f"bad DLRUN_BENCH_STORE_BACKEND {BACKEND!r}; valid: sqlite, postgresql")
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    from pg_cluster import cluster, new_database

    url = new_database(stack.enter_context(cluster()))
    config = home.parent / "config" / "dlrun"
    config.mkdir(parents=True)
    (config / "config.yaml").write_text(f"store: {url}\n")
    return url


def measure(threads: int, repeats: int, log, quick: bool = False) -> list[Row]:
    n = 3 if quick else 7
    rows: list[Row] = []
    record: dict = {"repeats": n, "store_runs": STORE_RUNS, "commands": {}}
    record["backend"] = BACKEND
    with tempfile.TemporaryDirectory(prefix="dlrun-bench-compare-") as tmp, ExitStack() as stack:
        home = Path(tmp) / "home"
        home.mkdir()
        where = _store(stack, home)
        log(f"[7] fill a {BACKEND} store with {STORE_RUNS:,} results (keys included)")
        record["fill"] = fill_store(where, STORE_RUNS)
        log(f"[7] filled in {record['fill']['total_s']:.1f} s (rows {record['fill']['rows_s']:.1f} s, aggregates "
            f"{record['fill']['aggregates_s']:.1f} s, peak RSS {record['fill']['max_rss_mib']:.0f} MiB)")
        env = bench_env(threads, DLRUN_HOME=str(home), XDG_CACHE_HOME=str(Path(tmp) / "cache"), DLRUN_SITE="bench",
                        XDG_CONFIG_HOME=str(Path(tmp) / "config"))
        for name, args in COMMANDS.items():
            argv = [DLRUN, *(arg.replace("{out}", str(Path(tmp) / "report")) for arg in args)]
            first, _ = timed(argv, env)  # fills the model-facts cache where efficiency columns need it
            samples = [timed(argv, env) for _ in range(n)]
            times, cpu = [w for w, _ in samples], [c for _, c in samples]
            record["commands"][name] = {"argv": args, "first_s": first, "times_s": times, "cpu_s": cpu}
            log(f"[7] {name}: first {first:.2f} s, then {spread(times)} s wall, {spread(cpu)} s CPU")
            on = "" if BACKEND == "sqlite" else f" [{BACKEND}]"
            rows.append(Row("7 compare", f"dlrun {name}{on}", median(times), unit="s", goal=GOAL, goal_op="<=",
                            detail=f"{spread(times)} s; CPU {median(cpu):.2f} s; first call {first:.2f} s"))
    write_result("compare_store", record)
    return rows


if __name__ == "__main__":
    for row in measure(threads=2, repeats=1, log=lambda line: print(line, file=sys.stderr)):
        print(row.judge().to_dict())
