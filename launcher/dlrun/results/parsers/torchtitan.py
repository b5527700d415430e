"""torchtitan training logs: the metrics line each rank logs every `log_freq` steps,

    [rank0]:[titan] 2025-07-21 15:57:42,241 - root - INFO - step:  2  loss:  6.6131  grad_norm:  3.5341
    memory:  0.00GiB(0.00%)  tps: 34,387  tflops: 3.52  mfu: 0.36%

(one line in the log), with torchrun's `[rankN]:` tag (`--tee 3`) or without one (every rank's lines
interleaved), ANSI colours where it logged to a terminal, thousands separators in `tps` (older releases print
`wps`). torchtitan's `tps` is tokens per second per GPU (the tokens of the rank's data-parallel replica over the
time since the last log, divided by the GPUs of the replica), `tflops` the model FLOP rate per GPU, `mfu` the
share of the peak FLOPS the log states.

The value is tokens/s over all GPUs, derived and labelled so: the median, over the logged steps but the first
(whose time since training started holds compilation and autotuning), of each step's mean per-GPU `tps` over
the lines logged for it, times the number of GPUs (the device mesh the log builds, else the ranks that logged,
else the most lines one step has). Per-rank medians are kept where lines carry rank tags.
"""
from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from dlrun.results.parsers.common import NUMBER, Log, log_lines, read_float
from dlrun.results.parsers.result import ParsedResult, ParseError
from dlrun.text import plain

NAME = "torchtitan"
DESCRIPTION = "torchtitan: `step: N  loss: ...  tps: N  tflops: N  mfu: N%` lines of every rank"
RANK = re.compile(r"^\[(?:rank|default)(?P<rank>\d{1,7})\]:")
STEP = re.compile(rf"\bstep:\s*(?P<step>\d{{1,12}})\s+loss:\s*(?P<loss>{NUMBER})\b")
RATE = re.compile(r"\b(?P<key>tps|wps):\s*(?P<value>\d{1,3}(?:,\d{3}){0,6}|\d{1,20})(?![\d,.])")
FIGURES = {"tflops": re.compile(rf"\btflops:\s*(?P<value>{NUMBER})"),
           "mfu_pct": re.compile(rf"\bmfu:\s*(?P<value>{NUMBER})%")}
MESH = re.compile(r"Building (?P<dims>\d)-D device mesh with \[[^\]]{0,400}\], \[(?P<sizes>[\d, ]{1,100})\]")
BATCH = re.compile(r"Trainer is initialized with local batch size (?P<local>\d{1,9}), global batch size "
                   r"(?P<global>\d{1,12}),.*?sequence length (?P<seq>\d{1,9})")
MODEL = re.compile(r"\bBuilding (?P<model>[A-Za-z0-9_.-]{1,80} [A-Za-z0-9_.-]{1,80}) with ")
PEAK = re.compile(rf"Peak FLOPS used for computing MFU: (?P<value>{NUMBER})")
MAX_STEPS = 1_000_000


@dataclass
class _Log:
    steps: dict[int, list[tuple[int | None, float, dict[str, float]]]] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    rate_key: str = "tps"
    lines: int = 0


def parse(text: Log) -> list[ParsedResult]:
    log = _Log()
    for raw in log_lines(text):
        line = plain(raw, newlines=False)  # ANSI colours out
        rank = None
        if match := RANK.match(line):
            rank, line = int(match.group("rank")), line[match.end():]
        if "step:" in line and (step := STEP.search(line)):
            _step(log, rank, step, line)
        elif "[titan]" in line or "Building" in line:
            _fact(log.facts, line)
    if not log.steps:
        return []
    return [_result(log)]


def _step(log: _Log, rank: int | None, match: re.Match, line: str) -> None:
    rate = RATE.search(line, match.end())
    if rate is None:
        return  # a validation or other step line without a throughput
    if log.lines >= MAX_STEPS:
        raise ParseError(f"torchtitan log has more than {MAX_STEPS:,} step lines")
    log.lines += 1
    log.rate_key = rate.group("key")
    tps = read_float(rate.group("value").replace(",", ""), f"torchtitan {rate.group('key')}")
    figures = {"loss": read_float(match.group("loss"), "torchtitan loss")}
    for name, pattern in FIGURES.items():
        if found := pattern.search(line, match.end()):
            figures[name] = read_float(found.group("value"), f"torchtitan {name}")
    log.steps.setdefault(int(match.group("step")), []).append((rank, tps, figures))


def _fact(facts: dict[str, Any], line: str) -> None:
    if match := MESH.search(line):
        sizes = [int(size) for size in match.group("sizes").replace(" ", "").split(",") if size]
        if sizes and all(0 < size <= 10**7 for size in sizes):
            facts["mesh"] = sizes
    elif match := BATCH.search(line):
        facts.update(local_batch=int(match.group("local")), global_batch=int(match.group("global")),
                     seq_len=int(match.group("seq")))
    elif (match := MODEL.search(line)) and "model" not in facts:
        facts["model"] = match.group("model")
    elif match := PEAK.search(line):
        facts["peak_flops"] = read_float(match.group("value"), "torchtitan peak FLOPS")


def _gpus(log: _Log) -> tuple[int | None, str]:
    """(GPUs the run used, where that number comes from)."""
    if "mesh" in log.facts:
        return math.prod(log.facts["mesh"]), f"the device mesh the log builds ({log.facts['mesh']})"
    ranks = {rank for lines in log.steps.values() for rank, _, _ in lines if rank is not None}
    if len(ranks) > 1:
        return len(ranks), f"the {len(ranks)} ranks that logged steps"
    most = max(len(lines) for lines in log.steps.values())
    if not ranks and most > 1:
        return most, f"the {most} untagged lines logged for one step, one per rank"
    return None, ""


def _result(log: _Log) -> ParsedResult:
    steps = sorted(log.steps)
    timed = steps[1:] or steps
    per_step = {step: statistics.fmean(tps for _, tps, _ in log.steps[step]) for step in timed}
    per_gpu = statistics.median(per_step.values())
    gpus, gpus_from = _gpus(log)
    skipped = f"steps {timed[0]}-{timed[-1]} (the first logged step, {steps[0]}, left out: its time holds " \
              "compilation)" if len(steps) > 1 else f"step {steps[0]}, the only one logged"
    what = (f"median over {skipped} of each step's mean per-GPU {log.rate_key} (torchtitan's tokens/s per GPU, "
            f"over the {max(len(v) for v in log.steps.values())} line(s) per step)")
    if gpus:
        value, value_is = per_gpu * gpus, f"derived: {what} x {gpus} GPUs, from {gpus_from}"
    else:
        value, value_is = per_gpu, f"{what}, per GPU: the log does not say how many GPUs ran"
    extra = _extra(log, timed, per_step, per_gpu)
    facts = log.facts
    return ParsedResult(kind=NAME, metric="throughput", value=value, unit="tokens/sec", model=facts.get("model"),
                        batch_size=facts.get("local_batch") or None, num_devices=gpus, extra=extra,
                        value_is=value_is)


def _extra(log: _Log, timed: list[int], per_step: dict[int, float], per_gpu: float) -> dict[str, Any]:
    last = log.steps[timed[-1]]
    extra: dict[str, Any] = {
        "tokens_per_sec_per_device": per_gpu, "rate_printed": log.rate_key, "logged_steps": sorted(log.steps),
        "per_step_tps_per_device": {str(step): value for step, value in per_step.items()},
        "step_lines": log.lines, "final_loss": last[0][2]["loss"],
        **{key: log.facts[key] for key in ("global_batch", "seq_len", "mesh", "peak_flops") if key in log.facts}}
    for name in FIGURES:
        values = [figures[name] for step in timed for _, _, figures in log.steps[step] if name in figures]
        if values:
            extra[f"median_{name}_per_device" if name == "tflops" else f"median_{name}"] = statistics.median(values)
    ranks: dict[int, list[float]] = {}
    for step in timed:
        for rank, tps, _ in log.steps[step]:
            if rank is not None:
                ranks.setdefault(rank, []).append(tps)
    if len(ranks) > 1:
        medians = {rank: statistics.median(values) for rank, values in sorted(ranks.items())}
        slowest = min(medians, key=medians.__getitem__)
        extra["per_rank_median_tps"] = {str(rank): value for rank, value in medians.items()}
        extra["slowest_rank"] = {"rank": slowest, "ratio_to_median": medians[slowest]
                                 / statistics.median(medians.values())}
    return extra
