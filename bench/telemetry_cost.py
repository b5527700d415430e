"""Benchmark 11: what telemetry costs a training run.

The same ResNet-50 run (fp32, synthetic data, one rank with every core, batch 16) through dlrun with the
telemetry sampler at its default period (1 s) and with it off, each in a fresh process, alternated on/off/on/
off; compared is the throughput dlrun stores (the harness's timed steps). Each process builds the plan through
dlrun's API with `telemetry=PERIOD|off` (the option `--telemetry`) and renders and executes it as `dlrun run`
does, so that the sampler's own CPU seconds can be read back. Goal: telemetry at 1 s costs at most 1 %.

Load-robust (the machine this runs on is shared and its load moves by several units within minutes): each
round runs on and off back to back (alternated order), and the figures are the rounds' paired ratios, whose
geometric mean gets a 95 % t interval on the logs (dlrun.results.compare.stats.summarize): drift between rounds
cancels within a pair. Two figures: throughput on / off (what a user sees, blurred by the others' work), and
CPU seconds off / on of the whole run (the harness, its launcher and the sampler: getrusage of the run's
children), which other processes do not add to. The load average is recorded at each run's start and end.
Rounds go on (at least the run's --repeats, at most ROUNDS_MAX) until the throughput interval decides: PASS
when all of it is at or above 0.99, MISS when all of it is below, INCONCLUSIVE when the rounds ran out first.

A third figure decides what two noisy ratios may not: the sampler's own CPU seconds (its end line, from the
kernel's accounting) as a share of the CPU seconds the run had (its wall seconds times its cores), goal at
most 1 %. It misses the indirect cost of a woken process on a busy core, which the paired rounds bound.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import BENCH_DIR, PYTHON, Row, alternate_until_decided, bench_env, spread, verdict, write_result

GOAL = 0.99
SHARE_GOAL = 1.0  # per cent: the sampler's own CPU seconds over the run's
ROUNDS_MAX = 8
CASE = ("resnet50", 16, 10, 2)  # workload, batch, timed steps, warm-up steps

ONE_RUN = r"""
import json, sys
from dlrun.cli.options import load_catalog
from dlrun.execute import execute
from dlrun.paths import runs_dir
from dlrun.plan import resolve_plan
from dlrun.preflight import node_inventory
from dlrun.render import render_job
from dlrun.results.store import Store
from dlrun.paths import store_path
import resource
workload, batch, steps, warmup, threads, period = sys.argv[1:7]
plan = resolve_plan(load_catalog(), workload, batch_size=int(batch), steps=int(steps), warmup_steps=int(warmup),
                    threads=int(threads), telemetry=period)
from dlrun.execute.prerun import Cleared
record = execute(plan, render_job(plan), runs_root=runs_dir(), store=Store(store_path()),
                 cleared=Cleared(inventory=node_inventory(), findings=[]))
assert record.status == "ok", record.reason
from dlrun.telemetry.series import read_run
ends = [s.end or {} for s in read_run(record.path)]
status = json.loads((record.path / "status.json").read_text())
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"value": record.result["value"], "run_s": status["duration_s"],
                  "cpu_s": used.ru_utime + used.ru_stime,
                  "sampler_cpu_s": sum(e.get("cpu_s", 0) for e in ends) if ends else None}))
"""


COSTS: list[dict] = []  # the sampler's own CPU seconds per telemetry run, with the run's seconds
RUNS: list[dict] = []   # every run: telemetry on/off, img/s, the run's CPU seconds, load average before/after


def _once(home: Path, threads: int, period: str) -> float:
    workload, batch, steps, warmup = CASE
    env = bench_env(threads, DLRUN_HOME=str(home), PYTHONPATH=str(BENCH_DIR.parent / "launcher"))
    load_before = os.getloadavg()[0]
    proc = subprocess.run([PYTHON, "-c", ONE_RUN, workload, str(batch), str(steps), str(warmup), str(threads), period],
                          capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"telemetry {period}: exited {proc.returncode}: {proc.stderr.strip()[-600:]}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    RUNS.append({"telemetry": period, "img_s": data["value"], "cpu_s": data["cpu_s"], "run_s": data["run_s"],
                 "load1": [round(load_before, 2), round(os.getloadavg()[0], 2)]})
    if data["sampler_cpu_s"] is not None:
        COSTS.append({"sampler_cpu_s": data["sampler_cpu_s"], "run_s": data["run_s"]})
    return float(data["value"])


def _paired(name: str) -> list[float]:
    """Per round, on / off of `name` (img_s), or off / on (cpu_s: fewer CPU seconds is better)."""
    on = [r[name] for r in RUNS if r["telemetry"] != "off"]
    off = [r[name] for r in RUNS if r["telemetry"] == "off"]
    return [a / b for a, b in zip(on, off)] if name == "img_s" else [b / a for a, b in zip(on, off)]


def _interval(ratios: list[float]) -> tuple[str, str]:
    """(the paired ratios' geometric mean and 95 % interval in words, their verdict against GOAL)."""
    from dlrun.results.compare.stats import summarize

    s = summarize(ratios)
    if s.ci_low is None or s.ci_high is None:
        return f"{s.geomean:.4f}x ({s.interval})", "INCONCLUSIVE"
    return (f"{s.geomean:.4f}x (95 % CI {s.ci_low:.4f}-{s.ci_high:.4f}, n={s.n} rounds)",
            verdict({"low": s.ci_low, "high": s.ci_high}, GOAL))


def measure(threads: int, repeats: int, log, quick: bool = False) -> list[Row]:
    least, most = (1, 1) if quick else (repeats, max(repeats, ROUNDS_MAX))
    with tempfile.TemporaryDirectory(prefix="dlrun-bench-") as tmp:
        home = Path(tmp)
        values = alternate_until_decided({"on": lambda: _once(home, threads, "1"),
                                          "off": lambda: _once(home, threads, "off")}, GOAL, least, most, log)
    from dlrun.results.compare.stats import geometric_mean

    speed, cpu = _paired("img_s"), _paired("cpu_s")
    (speed_text, speed_status), (cpu_text, cpu_status) = _interval(speed), _interval(cpu)
    share = sum(c["sampler_cpu_s"] for c in COSTS) / sum(c["run_s"] * threads for c in COSTS) if COSTS else None
    loads = [x for r in RUNS for x in r["load1"]]
    write_result("telemetry_cost", {"goal": GOAL, "threads": threads, "repeats": repeats, "case": CASE,
                                    "img_s": values, "runs": RUNS, "paired_img_s_ratio": speed,
                                    "paired_cpu_ratio": cpu, "sampler": COSTS, "sampler_cpu_share": share,
                                    "load1_range": [min(loads), max(loads)] if loads else None})
    load = f"; load average {min(loads):.1f}-{max(loads):.1f}" if loads else ""
    quick_status = "INFO" if quick else ""
    sampler_s = sum(c["sampler_cpu_s"] for c in COSTS)
    return [Row("11 telemetry", "ResNet-50 fp32 b16, telemetry at 1 s / off: throughput", geometric_mean(speed),
                goal=GOAL, status=quick_status or speed_status,
                detail=f"paired rounds {speed_text}; on {spread(values['on'])} vs off {spread(values['off'])} "
                       f"img/s{load}"),
            Row("11 telemetry", "ResNet-50 fp32 b16, telemetry at 1 s / off: CPU seconds off / on",
                geometric_mean(cpu), goal=GOAL, status=quick_status or cpu_status,
                detail=f"paired rounds {cpu_text}{load}"),
            Row("11 telemetry", "the sampler's own CPU seconds / the run's CPU seconds (wall x cores)",
                None if share is None else share * 100, unit="%", goal=SHARE_GOAL, goal_op="<=",
                detail=f"{sampler_s:.2f} CPU s over {len(COSTS)} runs of "
                       f"{sum(c['run_s'] for c in COSTS):.0f} s on {threads} cores" if COSTS else "no sampler ran",
                status="" if COSTS else "N/A")]


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    from common import cpu_count

    for row in measure(args.threads or cpu_count(), args.repeats, lambda line: print(line, file=sys.stderr)):
        print(row)
