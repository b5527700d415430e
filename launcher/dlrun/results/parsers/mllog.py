"""MLPerf training/HPC logs (`:::MLLOG {json}`, the mlperf-logging format since v0.7) that print a throughput.

Throughput is logged as `"key": "tracked_stats", "value": {"throughput": X}` (samples per second, as the
MLPerf logging rules define it), several times in a run; we report the last one. Lines may carry launcher
tags (`srun --label` gives `0: `). The run's end status and the benchmark's name are kept alongside.

The LLM pretraining benchmarks (Llama 3.1 8B/405B, NeMo, v5.x) log no throughput: their `tracked_stats` hold
`train_step_time` (seconds per optimizer step), beside `global_batch_size` (sequences per step) and
`max_sequence_length`. Their figure is derived, and says so: tokens/s = global_batch_size x
max_sequence_length / the median train_step_time.
"""
from __future__ import annotations

import statistics
from typing import Any

from dlrun.results.parsers.common import json_records
from dlrun.results.parsers.result import ParsedResult, ParseError, check_count, check_rate

NAME = "mllog"
DESCRIPTION = "MLPerf `:::MLLOG {json}` lines with a tracked_stats throughput (or train_step_time: tokens/s derived)"
PREFIX = ":::MLLOG "


def parse(text: str) -> list[ParsedResult]:
    throughputs: list[Any] = []
    step_times: list[Any] = []
    facts: dict[str, Any] = {}
    lines = malformed = 0
    for event in json_records(text, PREFIX, "MLLOG line"):
        lines += 1
        if not isinstance(event, dict):
            malformed += 1
            continue
        _take(event, throughputs, step_times, facts)
    if not lines:
        return []
    if not throughputs and step_times:
        return [_from_step_times(step_times, facts, lines, malformed)]
    if not throughputs:
        raise ParseError(f"MLPerf log ({lines} MLLOG lines) prints no throughput (no tracked_stats)")
    benchmark = facts.get("submission_benchmark")
    batch = facts.get("global_batch_size")
    return [ParsedResult(
        kind=NAME, metric="throughput", value=check_rate("MLPerf throughput", throughputs[-1]),
        unit="samples/sec", model=benchmark if isinstance(benchmark, str) and 0 < len(benchmark) <= 200 else None,
        extra={"throughputs": [check_rate("MLPerf throughput", item) for item in throughputs],
               "global_batch_size": check_count("global_batch_size", batch) if isinstance(batch, int) else None,
               "run_status": facts.get("run_status") if isinstance(facts.get("run_status"), str) else None,
               "mllog_lines": lines, "malformed_lines": malformed},
        value_is=(f"the last of the {len(throughputs)} throughputs logged (tracked_stats or throughput events)"
                  if len(throughputs) > 1 else "the one throughput logged (tracked_stats or throughput event)"),
    )]


def _take(event: dict[str, Any], throughputs: list[Any], step_times: list[Any], facts: dict[str, Any]) -> None:
    """One MLLOG event into the throughputs, step times and facts it holds."""
    key, value = event.get("key"), event.get("value")
    if key == "tracked_stats" and isinstance(value, dict) and "throughput" in value:
        throughputs.append(value["throughput"])
    elif key == "tracked_stats" and isinstance(value, dict) and "train_step_time" in value:
        step_times.append(value["train_step_time"])
    elif key == "throughput":
        throughputs.append(value.get("throughput") if isinstance(value, dict) else value)
    elif key in ("submission_benchmark", "global_batch_size", "submission_org", "submission_platform",
                 "max_sequence_length"):
        facts[key] = value
    elif key == "run_stop" and isinstance(event.get("metadata"), dict):
        facts["run_status"] = event["metadata"].get("status")


def _name(value: Any) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= 200 else None


def _from_step_times(step_times: list[Any], facts: dict[str, Any], lines: int, malformed: int) -> ParsedResult:
    """An LLM benchmark's tokens/s, derived from its step times, batch and sequence length."""
    batch, length = facts.get("global_batch_size"), facts.get("max_sequence_length")
    if isinstance(batch, float) and batch.is_integer():
        batch = int(batch)
    if not isinstance(batch, int) or not isinstance(length, int):
        raise ParseError(f"MLPerf log ({lines} MLLOG lines) prints no throughput, and its train_step_time "
                         "cannot give one without global_batch_size and max_sequence_length")
    check_count("global_batch_size", batch)
    check_count("max_sequence_length", length)
    times = [check_rate("MLPerf train_step_time", item) for item in step_times]
    median = statistics.median(times)
    if not median > 0:
        raise ParseError("MLPerf train_step_time has a median of 0 seconds: it measures nothing")
    return ParsedResult(
        kind=NAME, metric="throughput", value=batch * length / median, unit="tokens/sec",
        model=_name(facts.get("submission_benchmark")),
        extra={"derived_from": {"global_batch_size": batch, "max_sequence_length": length,
                                "median_train_step_time_s": median, "train_step_times": len(times)},
               "samples_per_sec": batch / median, "global_batch_size": batch,
               "run_status": facts.get("run_status") if isinstance(facts.get("run_status"), str) else None,
               "submission_platform": _name(facts.get("submission_platform")),
               "mllog_lines": lines, "malformed_lines": malformed},
        value_is=(f"derived, the log prints no throughput: global_batch_size {batch} x max_sequence_length "
                  f"{length} tokens / the median train_step_time ({median:.6g} s, of the {len(times)} "
                  "tracked_stats that log one)"),
    )
