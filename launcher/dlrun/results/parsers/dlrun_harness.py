"""dlrun's own harness: exactly one `DLRUN_RESULT {json}` line (rank 0), the rest is for humans."""
from __future__ import annotations

from typing import Any

from dlrun.harness.harness_result_schema import RESULT_PREFIX, result_problems
from dlrun.results.parsers.common import read_json, tagged_lines
from dlrun.results.parsers.result import ParsedResult, ParseError

NAME = "dlrun-harness"
DESCRIPTION = "dlrun's in-container harness: one `DLRUN_RESULT {json}` line"
PREFIX = RESULT_PREFIX


def parse(text: str) -> list[ParsedResult]:
    records = [line[len(PREFIX):] for _, line in tagged_lines(text) if line.startswith(PREFIX)]
    if not records:
        return []
    if len(records) > 1:
        raise ParseError(f"expected one {PREFIX.strip()} line, found {len(records)}")
    record = read_json(records[0], f"{PREFIX.strip()} line")
    if not isinstance(record, dict):
        raise ParseError(f"{PREFIX.strip()} is followed by a JSON {type(record).__name__}, expected an object")
    if record.get("reader") == "fio" and "value" not in record:
        return []  # the storage reader's line after fio's JSON: the value is fio's (the fio parser's)
    problems = result_problems(record)  # the contract's schema, as the harness checked it before printing
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ParseError(f"the {PREFIX.strip()} line breaks dlrun's result schema: {problems[0]}{more}")
    return [_result(record)]


def _value_is(rec: dict[str, Any]) -> str:
    """Which of the harness's figures the value is (the record's own words where it says)."""
    if isinstance(rec.get("value_is"), str):
        return rec["value_is"]
    if rec.get("metric") == "busbw":
        return "bus bandwidth at the largest message (time: the slowest rank's)"
    return ("total training throughput over all devices, timed steps only, wall time the slowest rank's: "
            + str(rec.get("formula", "world_size*batch_size_per_rank*timed_steps/wall_time_s"))[:200])


def _result(rec: dict[str, Any]) -> ParsedResult:
    metric = rec.get("metric", "throughput")
    world = rec.get("world_size")
    per_rank = rec.get("devices_per_rank", 1)  # DataParallel: one process, several GPUs
    return ParsedResult(
        kind=NAME,
        metric=metric,
        value=rec.get("value"),
        unit=rec.get("unit", "images/sec"),
        model=rec.get("model"),
        batch_size=rec.get("batch_size_per_rank"),
        num_devices=rec.get("num_devices", world),
        num_ranks=world,
        gpus_per_rank=(per_rank if isinstance(per_rank, int) else None) if world is not None else None,
        # nccl-tests' name of the collective (all_reduce, all_gather, ...); older results name only the benchmark
        collective=rec.get("collective") or ("all_reduce" if rec.get("benchmark") == "allreduce" else None),
        extra=rec,
        value_is=_value_is(rec)[:400],
    )
