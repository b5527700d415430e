"""Benchmark 12: the LLM harness vs a bare PyTorch loop of the same model, side by side (goal >= 0.98x).

Compared: the tokens/sec the harness reports (`DLRUN_RESULT`, timed steps only, warm-up excluded) for
llama3_tiny on synthetic tokens against `bare_loop_llm.py`'s over the same timed steps after the same warm-up:
same decoder, sequence length, batch, optimizer, threads and precision, both fresh processes under the same
allocator (the harness preloads tcmalloc; the bare loop gets it through LD_PRELOAD), alternated
harness/bare/bare/harness. The ratio is the geometric mean of the per-round ratios with its 95 % interval, and
rounds go on (at least ROUNDS_MIN, at most ROUNDS_MAX) until that interval decides against the goal: PASS when
all of it is at or above 0.98, MISS when all of it is below, INCONCLUSIVE when the rounds ran out first. On
this project's 2-core machines a single process's rate moves by up to 20 % (both variants alike, from one
process to the next), more than the effect the goal is about, so a median of five rounds decided nothing.
The harness's loader-only probe is turned off (`--loader-steps 0`): with synthetic data there is nothing to
load either way.

On a shared machine the wall-clock rates of seconds-long runs swing by several times with other people's
load, so a second comparison counts CPU time instead: each variant runs once with SHORT and once with LONG
timed steps, and the difference of the two processes' CPU seconds (user + system, from the kernel's
accounting of the reaped child) over the LONG - SHORT extra steps is the CPU cost of one timed step, start-up,
model build and warm-up cancelled out. Its ratio bare/harness is informational (the goal is on tokens/s).
"""
from __future__ import annotations

import resource

from common import (BENCH_DIR, HARNESS, PYTHON, Row, allocator_env, alternate_until_decided, bench_env,
                    harness_allocator, interval_text, median, ratio_interval, run_json, spread, verdict,
                    write_result)

GOAL = 0.98
# (model, sequence length, batch, timed steps, warm-up steps)
CASES = [("llama3_tiny", 128, 4, 20, 2)]
ROUNDS_MIN, ROUNDS_MAX = 5, 20


SHORT, LONG = 4, 12


def _cpu_run(argv, env, marker=None):
    """(JSON line, CPU seconds of the child process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    data, _ = run_json(argv, env=env, marker=marker)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return data, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _cpu_per_step(rounds, argv_for, env_for, log):
    """{variant: [CPU seconds per timed step, one per round]} by the SHORT/LONG difference."""
    per_step = {name: [] for name in argv_for}
    for round_ in range(rounds):
        for name in (list(argv_for) if round_ % 2 == 0 else list(argv_for)[::-1]):
            marker = "DLRUN_RESULT " if name == "harness" else None
            _, short = _cpu_run(argv_for[name](SHORT), env_for[name], marker)
            _, long = _cpu_run(argv_for[name](LONG), env_for[name], marker)
            per_step[name].append((long - short) / (LONG - SHORT))
            log(f"  cpu round {round_ + 1}/{rounds} {name}: {per_step[name][-1]:.3f} CPU s per step")
    return per_step


def _argv(model, seq, batch, warmup, threads):
    """{variant: steps -> the command of one run}."""
    def common(steps):
        return ["--model", model, "--seq-length", str(seq), "--batch-size", str(batch), "--steps", str(steps),
                "--warmup-steps", str(warmup), "--threads", str(threads)]
    return {"harness": lambda n: [PYTHON, str(HARNESS), *common(n), "--loader-steps", "0", "--display-every", str(n)],
            "bare": lambda n: [PYTHON, str(BENCH_DIR / "bare_loop_llm.py"), *common(n)]}


def measure(threads: int, repeats: int, log, quick: bool = False) -> list[Row]:
    alloc_name, alloc_lib = harness_allocator()
    rows: list[Row] = []
    record: dict = {"goal": GOAL, "threads": threads, "repeats": repeats, "cases": [],
                    "allocator": {"name": alloc_name, "library": alloc_lib}}
    env_for = {"harness": bench_env(threads), "bare": bench_env(threads, **allocator_env(alloc_name, alloc_lib))}
    for model, seq, batch, steps, warmup in CASES:
        argv_for = _argv(model, seq, batch, warmup, threads)
        results = []

        def harness():
            data, _ = run_json(argv_for["harness"](steps), env=env_for["harness"], marker="DLRUN_RESULT ")
            results.append(data)
            return float(data["value"])

        def bare():
            return float(run_json(argv_for["bare"](steps), env=env_for["bare"])[0]["tokens_per_sec"])

        log(f"[11] {model} seq {seq} batch {batch} fp32, {warmup}+{steps} steps, {threads} threads, "
            f"allocator {alloc_name}")
        least, most = (1, 1) if quick else (max(repeats, ROUNDS_MIN), max(repeats, ROUNDS_MAX))
        samples = alternate_until_decided({"harness": harness, "bare": bare}, GOAL, least, most, log)
        interval = ratio_interval([h / b for h, b in zip(samples["harness"], samples["bare"])])
        mismatch = [r for r in results if r.get("allocator") != alloc_name or not r.get("fused_optimizer")]
        rows.append(Row("11 LLM harness", f"{model} seq {seq} b{batch} fp32: harness/bare tokens/s",
                        interval["ratio"], goal=GOAL,
                        detail=f"geometric mean of per-round ratios {interval_text(interval)}; harness "
                               f"{spread(samples['harness'])} vs bare {spread(samples['bare'])} tokens/s; both "
                               f"{alloc_name}" + (" (MISMATCH: another allocator or an unfused optimizer)"
                                                  if mismatch else ""),
                        status="MISS" if mismatch else ("" if quick else verdict(interval, GOAL))))
        cpu = _cpu_per_step(1 if quick else repeats, argv_for, env_for, log)
        cpu_ratio = median([b / h for h, b in zip(cpu["harness"], cpu["bare"])])
        rows.append(Row("11 LLM harness", f"{model}: CPU seconds per timed step, bare/harness", cpu_ratio,
                        detail=f"median of per-round ratios; harness {spread(cpu['harness'])} vs bare "
                               f"{spread(cpu['bare'])} CPU s/step ({LONG} - {SHORT} steps); informational"))
        last = results[-1]
        rows.append(Row("11 LLM harness", f"{model}: model FLOP rate of the harness's last run",
                        None, detail=f"{last['flops_per_token']} FLOPs/token x {last['value']:.0f} tokens/s = "
                                     f"{last['achieved_tflops'] * 1e3:.1f} GFLOP/s (no matmul ceiling passed)",
                        status="INFO"))
        record["cases"].append({"model": model, "seq_length": seq, "batch": batch, "steps": steps,
                                "warmup_steps": warmup, "samples_tokens_s": samples, "ratio": interval["ratio"],
                                "interval": interval,
                                "cpu_s_per_step": cpu, "cpu_ratio": cpu_ratio, "harness_result": last})
    write_result("llm", record)
    return rows
