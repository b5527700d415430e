"""MLPerf training/HPC logs (`:::MLLOG {json}`, the mlperf-logging format since v0.7) that print a throughput.

Throughput is logged as `"key": "tracked_stats", "value": {"throughput": X}` (samples per second, as the
MLPerf logging rules define it), several times in a run; we report the last one. Lines may carry launcher
tags (`srun --label` gives `0: `). The run's end status and the benchmark's name are kept alongside.
"""
from __future__ import annotations

from typing import Any

from dlrun.results.parsers.common import json_records
from dlrun.results.parsers.result import ParsedResult, ParseError, check_count, check_rate

NAME = "mllog"
DESCRIPTION = "MLPerf `:::MLLOG {json}` lines with a tracked_stats throughput"
PREFIX = ":::MLLOG "


def parse(text: str) -> list[ParsedResult]:
    throughputs: list[Any] = []
    facts: dict[str, Any] = {}
    lines = malformed = 0
    for event in json_records(text, PREFIX, "MLLOG line"):
        lines += 1
        if not isinstance(event, dict):
            malformed += 1
            continue
        key, value = event.get("key"), event.get("value")
        if key == "tracked_stats" and isinstance(value, dict) and "throughput" in value:
            throughputs.append(value["throughput"])
        elif key == "throughput":
            throughputs.append(value.get("throughput") if isinstance(value, dict) else value)
        elif key in ("submission_benchmark", "global_batch_size", "submission_org", "submission_platform"):
            facts[key] = value
        elif key == "run_stop" and isinstance(event.get("metadata"), dict):
            facts["run_status"] = event["metadata"].get("status")
    if not lines:
        return []
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
