"""NeMo training logs, from the two loggers NeMo has had:

NeMo 2 (and Megatron-Bridge's NeMo-style recipes) print one line per step,

    Training epoch 0, iteration 74/99 | lr: 1.124e-05 | global_batch_size: 128 | global_step: 74 | ...
    | reduced_train_loss: 11.87 | train_step_timing in s: 8.768 | TFLOPS_per_GPU: 865.7 | consumed_samples: 9600

NeMo 1 (PyTorch Lightning's progress bar) redraws one line, each redraw after a carriage return,

    Epoch 0: : 100%|██████████| 100/100 [20:15<00:00, reduced_train_loss=6.370, global_step=99.00,
    consumed_samples=12800.0, train_step_timing in s=11.20]

`train_step_timing in s` is the time of the step (NeMo's timing callback, averaged over the log interval). The bar
prints no global batch size: it is derived as consumed_samples / (global_step + 1), which is what NeMo's
`compute_consumed_samples` counts after step `global_step`, and said so.

The value is derived, and says so: global batch size x seq_length tokens / the median step time (tokens/s) where
the log states its sequence length (its config dump, `seq_length: 8192`), else global batch size / the median
step time (samples/s), the median over the logged steps but the first (whose time holds warm-up). A printed
`TFLOPS_per_GPU` or `tokens_per_sec_per_gpu` is kept beside it.
"""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from dlrun.results.parsers.common import NUMBER, Log, log_lines, read_float, read_int, untag
from dlrun.results.parsers.result import ParsedResult, ParseError
from dlrun.text import plain

NAME = "nemo"
DESCRIPTION = ("NeMo: `Training epoch N, iteration N/M | ... | train_step_timing in s: N` lines (NeMo 2), or the "
               "`Epoch N: ... train_step_timing in s=N` progress bar (NeMo 1)")
NEMO2 = re.compile(r"Training epoch (?P<epoch>\d{1,9}), iteration (?P<iteration>\d{1,12})/(?P<total>\d{1,12})"
                   r"(?P<fields>\s?\|.*)$")
NEMO2_FIELD = re.compile(rf"^\s*(?P<key>[A-Za-z_][\w ]{{0,60}}?):\s*(?P<value>{NUMBER})\s*$")
NEMO1 = re.compile(r"Epoch (?P<epoch>\d{1,9}): .{0,200}?\["
                   r"(?P<fields>[^\[\]]{0,2000}train_step_timing in s=[^\[\]]{0,2000})\]")
NEMO1_FIELD = re.compile(rf"^\s*(?P<key>[A-Za-z_][\w /]{{0,60}}?)=(?P<value>{NUMBER})\s*$")
SEQ = re.compile(r"^\s{0,40}(?:encoder_)?seq_length: (?P<seq>\d{1,9})\s*$")
TIME = "train_step_timing in s"
PRINTED = ("TFLOPS_per_GPU", "tokens_per_sec_per_gpu")
MAX_LINES = 1_000_000


@dataclass
class _Log:
    steps: dict[int, dict[str, float]] = field(default_factory=dict)
    style: str = ""
    seq_length: int | None = None
    lines: int = 0


def parse(text: Log) -> list[ParsedResult]:
    log = _Log()
    for raw in log_lines(text):
        _, line = untag(plain(raw, newlines=False))
        if TIME not in line:
            if log.seq_length is None and (match := SEQ.match(line)):
                log.seq_length = read_int(match.group("seq"), "NeMo seq_length")
            continue
        if match := NEMO2.search(line):
            _step(log, "NeMo 2", int(match.group("iteration")), _fields(match.group("fields"), NEMO2_FIELD))
        elif match := NEMO1.search(line):
            figures = _fields(match.group("fields"), NEMO1_FIELD)
            if "global_step" in figures:
                _step(log, "NeMo 1", int(figures["global_step"]), figures)
    if not log.steps:
        return []
    return [_result(log)]


def _fields(text: str, pattern: re.Pattern) -> dict[str, float]:
    figures: dict[str, float] = {}
    for part in text.split("|" if pattern is NEMO2_FIELD else ","):
        if found := pattern.match(part):
            figures[found.group("key").strip()] = read_float(found.group("value"), f"NeMo {found.group('key')}")
    return figures


def _step(log: _Log, style: str, step: int, figures: dict[str, float]) -> None:
    if TIME not in figures:
        return  # a redraw before the first timing (`train_step_timing in s=` with no number)
    if log.lines >= MAX_LINES:
        raise ParseError(f"NeMo log has more than {MAX_LINES:,} step lines")
    log.lines += 1
    log.style = log.style or style
    log.steps[step] = figures  # a progress bar redraws a step: its last redraw holds its timing


def _batch(log: _Log, step: int) -> tuple[int | None, str]:
    """(global batch size, where it comes from) at `step`."""
    figures = log.steps[step]
    if "global_batch_size" in figures:
        return int(figures["global_batch_size"]), "global_batch_size"
    consumed, done = figures.get("consumed_samples"), figures.get("global_step", float(step)) + 1
    if consumed and float(consumed / done).is_integer():
        return int(consumed / done), (f"derived from the bar as consumed_samples / (global_step + 1) = "
                                      f"{consumed:g} / {done:g}")
    return None, ""


def _result(log: _Log) -> ParsedResult:
    steps = sorted(log.steps)
    timed = steps[1:] or steps
    median = statistics.median(log.steps[step][TIME] for step in timed)
    batch, batch_from = _batch(log, timed[-1])
    if not batch or not median > 0:
        raise ParseError(f"{log.style} log gives no global batch size (or a step time of 0 s): no throughput can "
                         "be derived from its train_step_timing")
    which = (f"steps {timed[0]}-{timed[-1]} (the first logged, {steps[0]}, left out: its time holds warm-up)"
             if len(steps) > 1 else f"step {steps[0]}, the only one logged")
    step_is = f"the median `train_step_timing in s` over {which}, {median:.6g} s"
    batch_is = f"global batch size {batch} ({batch_from})"
    if log.seq_length:
        value, unit = batch * log.seq_length / median, "tokens/sec"
        value_is = f"derived: {batch_is} x seq_length {log.seq_length} tokens (the config dump) / {step_is}"
    else:
        value, unit = batch / median, "samples/sec"
        value_is = f"derived: {batch_is} samples / {step_is} (the log states no seq_length, so no tokens/s)"
    extra: dict[str, Any] = {
        "logger": log.style, "logged_steps": steps, "timed_steps": timed, "median_step_time_s": median,
        "global_batch_size": batch, "samples_per_sec": batch / median, "step_lines": log.lines,
        "step_time_s": {str(step): log.steps[step][TIME] for step in steps}, "seq_length": log.seq_length,
        "final_reduced_train_loss": log.steps[steps[-1]].get("reduced_train_loss")}
    for name in PRINTED:
        values = [log.steps[step][name] for step in timed if name in log.steps[step]]
        if values:
            extra[f"median_{name}_printed"] = statistics.median(values)
    return ParsedResult(kind=NAME, metric="throughput", value=value, unit=unit, extra=extra, value_is=value_is)
