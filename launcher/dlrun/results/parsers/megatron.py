"""Megatron-LM training logs (and Megatron-Bridge's, which logs through the same loop): the line the last rank
prints every `--log-interval` iterations,

     [2024-04-06 02:59:36] iteration       43/     100 | consumed samples:         5504 | elapsed time per
    iteration (ms): 5444.9 | throughput per GPU (TFLOP/s/GPU): 239.8 | learning rate: 8.600000E-06 | global batch
    size:   128 | lm loss: 1.825991E+00 | ... | number of skipped iterations:   0 | number of nan iterations:   0 |

(one line in the log; `throughput per GPU` only under `--log-throughput`), with a launcher's tag before it or
torchrun's `[defaultN]:`/`[rankN]:`, and the arguments dump Megatron-LM prints first (`  seq_length ....... 4096`,
`using world size: 8, ...`). `elapsed time per iteration (ms)` is the mean time of the iterations since the
last line.

The value is derived, and says so: global batch size x seq_length tokens / the median step time (tokens/s) where
the log states its sequence length, else global batch size / the median step time (samples/s), the median taken
over the logged iterations but the first (whose time holds compilation, allocation and the data loader's first
fetch). The printed TFLOP/s per GPU is kept beside it. A log that shows Megatron-LM starting (its arguments dump,
its `using world size` line) but no iteration line is a failed run: one line, the error it printed, no number.
"""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from dlrun.results.parsers.common import NUMBER, Log, log_lines, read_float, read_int, untag
from dlrun.results.parsers.result import ParsedResult, ParseError
from dlrun.text import plain

NAME = "megatron-lm"
DESCRIPTION = ("Megatron-LM / Megatron-Bridge: ` iteration N/ M | ... | elapsed time per iteration (ms): N | ... "
               "| global batch size: N |` lines")
RANK = re.compile(r"^\[(?:rank|default)(?P<rank>\d{1,7})\]:")
ITERATION = re.compile(r"(?:^|\]|\s)iteration\s+(?P<iteration>\d{1,12})/\s*(?P<total>\d{1,12})\s*\|(?P<fields>.*)$")
FIELD = re.compile(rf"^\s*(?P<key>[A-Za-z][A-Za-z _/()-]{{0,60}}?):\s*(?P<value>{NUMBER})\s*$")
ARGUMENT = re.compile(r"^\s{1,4}(?P<key>[a-z_][a-z0-9_]{0,80}) \.{3,} (?P<value>\S.{0,200})$")
WORLD = re.compile(r"using world size: (?P<world>\d{1,9})\b")
STARTED = ("------------------------ arguments ------------------------", "using world size:",
           "> building GPT model", "pretrain_gpt.py", "megatron/training")
ERROR = re.compile(r"^\s*(?P<error>[A-Za-z_][\w.]{0,120}(?:Error|Exception)): (?P<message>\S.*)$")
TIME = "elapsed time per iteration (ms)"
TFLOPS = "throughput per GPU (TFLOP/s/GPU)"
KEPT_ARGUMENTS = ("seq_length", "global_batch_size", "micro_batch_size", "world_size", "tensor_model_parallel_size",
                  "pipeline_model_parallel_size", "context_parallel_size", "data_parallel_size", "bf16", "fp16",
                  "params_dtype", "fp8", "num_layers", "hidden_size")
MAX_LINES = 1_000_000


@dataclass
class _Log:
    iterations: dict[int, dict[str, float]] = field(default_factory=dict)
    arguments: dict[str, str] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    started: bool = False
    error: str | None = None
    lines: int = 0


def parse(text: Log) -> list[ParsedResult]:
    log = _Log()
    for raw in log_lines(text):
        _, line = untag(plain(raw, newlines=False))
        if match := RANK.match(line):
            line = line[match.end():]
        if "iteration" in line and TIME in line and (found := ITERATION.search(line)):
            _iteration(log, found)
        else:
            _fact(log, line)
    if not log.iterations:
        if log.started:
            raise ParseError("Megatron-LM stopped before its first iteration line; the log says: "
                             f"{log.error!r}" if log.error else
                             "Megatron-LM started (its arguments or world size are printed) but logged no iteration")
        return []
    return [_result(log)]


def _iteration(log: _Log, match: re.Match) -> None:
    if log.lines >= MAX_LINES:
        raise ParseError(f"Megatron-LM log has more than {MAX_LINES:,} iteration lines")
    log.lines += 1
    figures: dict[str, float] = {}
    for part in match.group("fields").split("|"):
        if found := FIELD.match(part):
            figures[found.group("key").strip()] = read_float(found.group("value"), f"Megatron-LM {found.group('key')}")
    if TIME not in figures:
        return  # a line cut by other output
    iteration = int(match.group("iteration"))
    log.iterations.setdefault(iteration, figures)  # the same line from another rank is the same iteration
    log.facts["train_iters"] = int(match.group("total"))


def _fact(log: _Log, line: str) -> None:
    if not log.started and any(marker in line for marker in STARTED):
        log.started = True
    if match := ARGUMENT.match(line):
        if match.group("key") in KEPT_ARGUMENTS:
            log.arguments.setdefault(match.group("key"), match.group("value").strip())
    elif match := WORLD.search(line):
        log.facts["world_size"] = read_int(match.group("world"), "Megatron-LM world size")
    elif log.error is None and (match := ERROR.match(line)) and not match.group("error").endswith("ChildFailedError"):
        log.error = f"{match.group('error')}: {match.group('message').strip()}"[:200]


def _argument_int(log: _Log, key: str) -> int | None:
    value = log.arguments.get(key)
    return read_int(value, f"Megatron-LM argument {key}") if value and value.isdigit() else None


def _result(log: _Log) -> ParsedResult:
    numbers = sorted(log.iterations)
    timed = numbers[1:] or numbers
    median_ms = statistics.median(log.iterations[number][TIME] for number in timed)
    batches = {int(log.iterations[number]["global batch size"]) for number in timed
               if "global batch size" in log.iterations[number]}
    batch = max(batches) if batches else _argument_int(log, "global_batch_size")
    if not batch or not median_ms > 0:
        raise ParseError("Megatron-LM iteration lines give no global batch size (or a step time of 0 ms), and the "
                         "arguments do not state one: no throughput can be derived")
    seq = _argument_int(log, "seq_length")
    which = (f"iterations {timed[0]}-{timed[-1]} (the first logged, {numbers[0]}, left out: its time holds "
             "warm-up)" if len(numbers) > 1 else f"iteration {numbers[0]}, the only one logged")
    step = f"the median `elapsed time per iteration (ms)` over {which}, {median_ms:.6g} ms"
    if seq:
        value, unit = batch * seq / (median_ms / 1000), "tokens/sec"
        value_is = f"derived: global batch size {batch} x seq_length {seq} tokens (the arguments dump) / {step}"
    else:
        value, unit = batch / (median_ms / 1000), "samples/sec"
        value_is = (f"derived: global batch size {batch} samples / {step} (the log states no seq_length, so no "
                    "tokens/s)")
    world = log.facts.get("world_size") or _argument_int(log, "world_size")
    return ParsedResult(kind=NAME, metric="throughput", value=value, unit=unit,
                        batch_size=_argument_int(log, "micro_batch_size"), num_devices=world,
                        problems=_problems(log, timed), extra=_extra(log, numbers, timed, median_ms, batch),
                        value_is=value_is)


def _problems(log: _Log, timed: list[int]) -> tuple[str, ...]:
    nan = [number for number in timed if log.iterations[number].get("number of nan iterations", 0) > 0]
    batches = {log.iterations[number].get("global batch size") for number in timed} - {None}
    problems = [f"Megatron-LM counted NaN iterations at the lines of iterations {nan}"] if nan else []
    if len(batches) > 1:
        problems.append(f"the global batch size changed over the timed iterations ({sorted(batches)}: a batch "
                        "ramp-up); the throughput takes the largest")
    return tuple(problems)


def _extra(log: _Log, numbers: list[int], timed: list[int], median_ms: float, batch: int) -> dict[str, Any]:
    extra: dict[str, Any] = {
        "logged_iterations": numbers, "timed_iterations": timed, "median_step_time_ms": median_ms,
        "global_batch_size": batch, "samples_per_sec": batch / (median_ms / 1000), "iteration_lines": log.lines,
        "train_iters": log.facts.get("train_iters"),
        "step_time_ms": {str(number): log.iterations[number][TIME] for number in numbers},
        "arguments": dict(sorted(log.arguments.items())),
        "skipped_iterations": sum(int(log.iterations[n].get("number of skipped iterations", 0)) for n in timed)}
    tflops = [log.iterations[number][TFLOPS] for number in timed if TFLOPS in log.iterations[number]]
    if tflops:
        extra["median_tflops_per_gpu_printed"] = statistics.median(tflops)
    loss = log.iterations[numbers[-1]].get("lm loss")
    if loss is not None:
        extra["final_lm_loss"] = loss
    precision = _precision(log.arguments)
    if precision:
        extra["precision_printed"] = precision
    return extra


def _precision(arguments: dict[str, str]) -> str | None:
    """The training precision the arguments dump states (bf16, fp16, fp8 over either), else None."""
    base = "bf16" if arguments.get("bf16") == "True" else "fp16" if arguments.get("fp16") == "True" else None
    fp8 = arguments.get("fp8")
    if base and fp8 not in (None, "None", "False"):
        return f"fp8 ({fp8}) over {base}"
    return base
