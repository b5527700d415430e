"""Benchmark 1, start-up: where a one-rank local `dlrun run`'s time outside the harness's own process goes.

Three processes, alternated round by round (the order flipped every round): `dlrun run trivial` (tuner off,
the run's defaults otherwise: telemetry on) through `startup_phases.py`, which times its phases; the harness
alone, started with the argv of that run's `run.sh`; the bare loop (`bare_loop.py`) on the same model. The
trivial model's steps take milliseconds, so each process is nearly all start-up and teardown.

- dlrun's own wall time = dlrun's process wall - the job's (status.json `duration_s`: from just before the
  job's process is started to its end): catalog, plan, checks, run directory, store, telemetry sampler,
  interpreter and imports. The goal (<= 1 s) is on this figure, for an idle machine.
- The harness's own start-up beyond a bare loop: time to first step, harness (`time_to_first_step_s`, from
  its process's fork, the allocator's re-exec included) against the bare loop's (from its fork too).
- CPU seconds (user + system, the process and its children) beside each wall time: on a shared machine they
  move far less with the load than wall seconds do.
"""
from __future__ import annotations

import json
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

from common import (BENCH_DIR, PYTHON, Row, alternate, bench_env, compile_launcher, cpu_seconds, latest_result,
                    median, spread, write_result)

GOAL_S = 1.0
WORKLOAD, MODEL, BATCH, STEPS, WARMUP = "trivial", "trivial", 64, 2, 1


def _job_argv(run_dir: Path) -> list[str]:
    """The harness's command line as the run's `run.sh` execs it."""
    line = next(ln for ln in (run_dir / "run.sh").read_text().splitlines() if ln.startswith("exec "))
    return shlex.split(line)[1:]


def measure(threads: int, repeats: int, log, quick: bool = False) -> list[Row]:
    compile_launcher()  # as an installed dlrun has it
    rounds = 1 if quick else max(repeats, 3)
    record: dict = {"threads": threads}
    with tempfile.TemporaryDirectory(prefix="dlrun-bench-startup-") as tmp:
        home = Path(tmp)
        env = bench_env(threads, DLRUN_HOME=str(home), DLRUN_TUNE="off")
        job: list[str] = []
        per: dict[str, list[dict]] = {"dlrun": [], "harness": [], "bare": []}

        def via_dlrun() -> float:
            phases = home / "phases.json"
            cpu, _, wall = cpu_seconds([PYTHON, str(BENCH_DIR / "startup_phases.py"), "run", WORKLOAD,
                                        "--steps", str(STEPS), "--warmup-steps", str(WARMUP),
                                        "--threads", str(threads)], env={**env, "DLRUN_PHASES_OUT": str(phases)})
            run, result = latest_result(home)
            run_dir = Path(run["run_dir"])
            status = json.loads((run_dir / "status.json").read_text())
            job[:] = _job_argv(run_dir)
            timed = json.loads(phases.read_text())
            own = wall - status["duration_s"]
            per["dlrun"].append({"wall_s": wall, "cpu_s": cpu, "job_s": status["duration_s"], "own_s": own,
                                 "start_up": result["extra"].get("start_up"), "phases": timed,
                                 "time_to_first_step_s": result["extra"].get("time_to_first_step_s")})
            return own

        def harness() -> float:
            argv = job or [PYTHON, str(BENCH_DIR.parent / "launcher/dlrun/harness/harness_pytorch.py"), "--model",
                           MODEL, "--batch-size", str(BATCH), "--steps", str(STEPS), "--warmup-steps", str(WARMUP),
                           "--device", "cpu", "--threads", str(threads)]
            cpu, stdout, wall = cpu_seconds(argv, env=bench_env(threads))
            result = json.loads(next(ln for ln in stdout.splitlines() if ln.startswith("DLRUN_RESULT "))[13:])
            per["harness"].append({"wall_s": wall, "cpu_s": cpu,
                                   "time_to_first_step_s": result["time_to_first_step_s"]})
            return result["time_to_first_step_s"]

        def bare() -> float:
            cpu, stdout, wall = cpu_seconds([PYTHON, str(BENCH_DIR / "bare_loop.py"), "--model", MODEL,
                                             "--batch-size", str(BATCH), "--steps", str(STEPS), "--warmup-steps",
                                             str(WARMUP), "--threads", str(threads)], env=bench_env(threads))
            data = json.loads(stdout.strip().splitlines()[-1])
            per["bare"].append({"wall_s": wall, "cpu_s": cpu, "time_to_first_step_s": data["time_to_first_step_s"]})
            return data["time_to_first_step_s"]

        with open("/proc/loadavg") as f:
            record["load_before"] = f.read().split()[:3]
        log(f"[1] start-up: dlrun run {WORKLOAD} (tuner off) vs its harness alone vs a bare loop, {rounds} rounds")
        samples = alternate({"dlrun": via_dlrun, "harness": harness, "bare": bare}, rounds, log)
        with open("/proc/loadavg") as f:
            record["load_after"] = f.read().split()[:3]
    record["samples"], record["processes"] = samples, per
    write_result("startup", record)
    return _rows(record, samples)


def _phase_medians(rounds: list[dict]) -> dict[str, float]:
    names = {name for r in rounds for name in r["dlrun"]["phases"]["phases"]}
    return {name: median([sum(s for _, s in r["dlrun"]["phases"]["phases"].get(name, [])) for r in rounds])
            for name in sorted(names)}


def _rows(record: dict, samples: dict) -> list[Row]:
    rounds = [{"dlrun": d} for d in record["processes"]["dlrun"]]
    phases = _phase_medians(rounds)
    interp = median([r["dlrun"]["phases"]["interpreter_s"] for r in rounds])
    imports = median([r["dlrun"]["phases"]["imports_s"] for r in rounds])
    breakdown = "; ".join(f"{name} {s:.3f}" for name, s in sorted(phases.items(), key=lambda kv: -kv[1])
                          if name != "job")
    load = f"load average {' '.join(record['load_before'])} -> {' '.join(record['load_after'])}"
    harness_extra = [h - b for h, b in zip(samples["harness"], samples["bare"])]
    return [
        Row("1 harness overhead", "one-rank local `dlrun run`: dlrun's own wall time outside the job", median(
            samples["dlrun"]), unit="s", goal=GOAL_S, goal_op="<=",
            detail=f"{spread(samples['dlrun'])} s; phases, median s: interpreter {interp:.3f}, imports "
                   f"{imports:.3f}, {breakdown} (the node inventory runs in a thread beside the catalog); "
                   f"dlrun CPU {spread([r['dlrun']['cpu_s'] for r in rounds])} s incl. the job's; {load}"),
        Row("1 harness overhead", "time to first step: harness - bare loop (trivial model)", median(harness_extra),
            unit="s", detail=f"harness {spread(samples['harness'])} s vs bare {spread(samples['bare'])} s from "
                             f"the process's fork (the allocator's re-exec included); informational; {load}"),
    ]
