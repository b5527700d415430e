"""`make bench`: measure dlrun against what it measures, side by side, as ratios next to their goals.

1 harness overhead   dlrun run vs a bare PyTorch loop of the same ops (ResNet-50, ResNet-18): the reference path
                     (PyTorch's own ops) and the tuned path, each judged by its ratio's interval
1 startup            where a one-rank local dlrun run's own time outside the harness's process goes
2 efficiency         training FLOP rate vs the best fp32 matrix product; bf16 amp vs fp32 (ResNet-50)
2b efficiency_bert   the same for BERT-base SQuAD (384 tokens, 12 layers)
3 launcher cost      --help, --dry-run, a 512-node render, a 100,000-run results list
4 container overhead cpu-reference under ch-run and podman vs chroot
5 communication      dlrun's all-reduce busbw vs Open MPI's MPI_Allreduce (mpi4py), 2 local ranks
6 GPU                bench/gpu.sh, on a GPU machine only
7 compare            dlrun compare and results list with filters over a store of 100,000 results
8 collectives        dlrun's five collectives vs a bare torch.distributed loop (gloo, 2 ranks), busbw >= 1 MiB
9 tf                 dlrun run --image host-tf (TensorFlow 2 harness) vs a bare Keras loop (ResNet-50)
10 realdata           ResNet-50 from a JPEG ImageFolder / TFRecord shards (2 data workers) vs synthetic data
11 telemetry          ResNet-50 with the telemetry sampler at 1 s vs without it
12 llm                the LLM harness (llama3_tiny) vs a bare PyTorch loop of the same model, tokens/s
13 tune               dlrun tune's choice for ResNet-50 vs every fixed configuration it tried; knobs recorded
14 storage            the harness's storage reader vs fio on one file, sequential read GB/s (O_DIRECT)

Every row carries the processor it was measured on (model, ISA extensions, bf16 and AMX), also in the table's
title and summary.json.

Each benchmark writes bench/results/<name>.json; the table goes to stdout and to bench/results/summary.json.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
import traceback

from rich.console import Console
from rich.table import Table

import collectives
import comm
import compare_store
import containers
import efficiency
import efficiency_bert
import launcher_cost
import llm
import overhead
import startup
import realdata
import storage
import telemetry_cost
import tf_overhead
import tuned
from common import Row, cpu_count, processor, processor_label, write_result

BENCHMARKS = {"overhead": overhead, "startup": startup, "efficiency": efficiency, "efficiency_bert": efficiency_bert,
              "launcher": launcher_cost, "containers": containers, "comm": comm, "compare": compare_store,
              "collectives": collectives, "tf": tf_overhead,
              "realdata": realdata, "telemetry": telemetry_cost, "llm": llm, "tune": tuned, "storage": storage}


def _versions() -> dict:
    import torch

    sys.path.insert(0, str(__import__("common").REPO_ROOT / "launcher"))
    import dlrun

    return {"python": platform.python_version(), "torch": torch.__version__, "dlrun": dlrun.__version__,
            "machine": platform.machine(), "cpus": cpu_count()}


_SUFFIX = {"s": " s", "%": " %", "x": "x"}


def _cell(row: Row) -> str:
    if row.value is None:
        return "-"
    return f"{row.value:.3f}{_SUFFIX[row.unit]}"


def _goal(row: Row) -> str:
    if row.goal is None:
        return ""
    return f"{row.goal_op} {row.goal:g}{_SUFFIX[row.unit]}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", choices=sorted(BENCHMARKS), help="run only these (repeatable)")
    p.add_argument("--repeats", type=int, default=3, help="A/B rounds per comparison (default 3)")
    p.add_argument("--threads", type=int, default=None, help="threads per process (default: all CPUs)")
    p.add_argument("--quick", action="store_true", help="fewer cases and repeats (a smoke test of the bench)")
    args = p.parse_args()
    threads = args.threads or cpu_count()
    repeats = 1 if args.quick else args.repeats
    console = Console(highlight=False, width=max(Console().width, 180))
    err = Console(stderr=True, highlight=False)
    log = lambda line: err.print(line, markup=False)  # noqa: E731
    with open("/proc/loadavg") as f:
        load_before = f.read().split()[:3]
    proc = processor()  # beside every ratio: a regression on one processor kind must stay visible
    log(f"processor: {processor_label(proc)}")
    started = time.time()
    rows: list[Row] = []
    for name, module in BENCHMARKS.items():
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        try:
            rows += module.measure(threads, repeats, log, quick=args.quick)
        except Exception as exc:  # one broken benchmark must not hide the others
            traceback.print_exc()
            rows.append(Row(name, "benchmark failed", None, status="FAIL", detail=f"{type(exc).__name__}: {exc}"))
        log(f"    ({name}: {time.perf_counter() - t0:.0f} s)")
    total = time.time() - started
    with open("/proc/loadavg") as f:
        load_after = f.read().split()[:3]

    table = Table(title=f"dlrun bench on {processor_label(proc)}: {threads} threads, {repeats} alternated rounds, "
                        f"{total:.0f} s (load average {' '.join(load_before)} -> {' '.join(load_after)})")
    for column in ("benchmark", "measured", "value", "goal", "", "numbers"):
        table.add_column(column, overflow="fold")
    styles = {"PASS": "green", "MISS": "red", "FAIL": "red", "SKIP": "yellow", "N/A": "yellow", "INFO": "dim",
              "INCONCLUSIVE": "yellow"}
    for row in rows:
        row.judge()
        row.extra.setdefault("processor", proc)
        table.add_row(row.bench, row.name, _cell(row), _goal(row),
                      f"[{styles.get(row.status, '')}]{row.status}[/]", row.detail)
    console.print(table)
    write_result("summary", {"started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                             "wall_s": total, "threads": threads, "repeats": repeats,
                             "load_average_before": load_before, "load_average_after": load_after,
                             "versions": _versions(), "processor": proc, "processor_label": processor_label(proc),
                             "rows": [r.to_dict() for r in rows]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
