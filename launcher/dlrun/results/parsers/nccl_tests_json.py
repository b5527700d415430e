"""nccl-tests `-J FILE` JSON (format version 3, nccl-tests >= 2.18.5): one object with `version`, `start_time`,
`args`, `env`, `nccl_version`, `config` (threads, GPUs, the `devices` list: rank, pid, host, device, its name),
`results` (one object per message size, out-of-place and in-place), `out_of_bounds`, `average_bus_bandwidth`
and `errors`.

It is read as nccl-tests writes it, quirks included: numbers written as padded strings (`"root": "    -1"`),
booleans as the strings "true"/"false" (and "unchecked" for an average with no threshold), `"errors": [""]`
for no error, `null` for the half a trace replay skips, and, under `-I 1` (2.19), each half's per-iteration
summary (`out_of_place_per_iter`: p50/p95/p99, coefficient of variation, each process's slowest times). The
value is the table parser's: the in-place bus bandwidth at the largest message.
"""
from __future__ import annotations

import dataclasses
import itertools
import re
import statistics
from typing import Any

from dlrun.results.parsers.common import Log, LogFile, log_lines, read_float, read_json
from dlrun.results.parsers.nccl_tests import TEST_NAME, _result, _Run, library_version
from dlrun.results.parsers.result import ParsedResult, ParseError, SizeRow
from dlrun.text import plain

NAME = "nccl-tests-json"
DESCRIPTION = "nccl-tests -J JSON: `{\"version\": 3, \"start_time\": ..., \"results\": [...]}`"
#: How nccl-tests' JSON begins (its writer's fixed order), so that no other JSON document is taken for it.
OPENING = re.compile(r'\A[ \t\n\r]*\{[ \t\n\r]*"version"[ \t\n\r]*:[ \t\n\r]*"? *\d{1,3} *"?[ \t\n\r]*,'
                     r'[ \t\n\r]*"start_time"')
MAX_ROWS = 4096
PER_ITERATION = ("min_us", "max_us", "avg_us", "p50_us", "p95_us", "p99_us", "stdev_us", "cv_pct",
                 "skipped_iterations")


def _text(text: Log) -> str | None:
    """The document's lines joined by newlines (as LogFile.text gives them) when it opens as nccl-tests' JSON,
    else None: a log file is read whole only then."""
    head = "\n".join(itertools.islice(log_lines(text), 4))
    if not OPENING.match(head):
        return None
    return text.text() if isinstance(text, LogFile) else "\n".join(log_lines(text))


def parse(text: Log) -> list[ParsedResult]:
    whole = _text(text)
    if whole is None:
        return []
    document = read_json(whole, "nccl-tests JSON")
    if not isinstance(document, dict) or not isinstance(document.get("results"), list):
        raise ParseError("nccl-tests JSON has no \"results\" list")
    config = document.get("config") if isinstance(document.get("config"), dict) else {}
    run = _Run(name=_program(document.get("args")), check_column="#wrong")
    run.threads, run.gpus = _int(config.get("nthreads"), "nthreads"), _int(config.get("ngpus"), "ngpus")
    devices = config.get("devices") if isinstance(config.get("devices"), list) else []
    run.ranks = [(_int(d.get("rank"), "rank"), _int(d.get("pid"), "pid"), _name(d.get("hostname"), "hostname"))
                 for d in devices if isinstance(d, dict)]
    iterations = _rows(run, document["results"])
    _summary(run, document)
    extra = {"json_format_version": document.get("version"), "start_time": _short(document.get("start_time")),
             "end_time": _short(document.get("end_time")), "errors": _errors(document.get("errors")),
             "device_names": sorted({_short(d.get("device_info")) for d in devices
                                     if isinstance(d, dict) and d.get("device_info")})}
    if iterations:
        extra["per_iteration"] = _iteration_summary(iterations, max(row.size_bytes for row in run.rows))
    result = _result(run, run.name, library_version(document.get("nccl_version")), extra)
    if extra["errors"]:
        result = dataclasses.replace(result, problems=result.problems + tuple(
            f"nccl-tests reported the error {error!r}" for error in extra["errors"]))
    return [result]


def _rows(run: _Run, results: list[Any]) -> dict[int, dict[str, Any]]:
    """The table's rows into `run`; each size's per-iteration summaries (size -> half -> summary), if any."""
    if len(results) > MAX_ROWS:
        raise ParseError(f"nccl-tests JSON has more than {MAX_ROWS} result rows")
    iterations: dict[int, dict[str, Any]] = {}
    for row in results:
        if not isinstance(row, dict):
            raise ParseError("nccl-tests JSON: a result row is not an object")
        size = _int(row.get("size"), "size")
        halves = [_half(row.get(name), name) for name in ("out_of_place", "in_place")]
        if halves[1] is None:
            raise ParseError(f"nccl-tests JSON: the row of {size} bytes has no in-place result")
        oop = halves[0] or halves[1]  # a trace replay writes only the in-place half
        redop = _short(row.get("redop"))
        run.rows.append(SizeRow(
            size_bytes=size, count=_int(row.get("count"), "count"), type=_short(row.get("type")) or "?",
            redop=None if redop in (None, "", "none") else redop, root=_int(row.get("root"), "root", minimum=-1),
            oop_time_us=oop[0], oop_algbw=oop[1], oop_busbw=oop[2], oop_wrong=oop[3],
            ip_time_us=halves[1][0], ip_algbw=halves[1][1], ip_busbw=halves[1][2], ip_wrong=halves[1][3]))
        summaries = {name: _per_iteration(row[key]) for name, key in
                     (("out_of_place", "out_of_place_per_iter"), ("in_place", "in_place_per_iter"))
                     if isinstance(row.get(key), dict)}
        if summaries:
            iterations[size] = summaries
    return iterations


def _half(data: Any, name: str) -> tuple[float, float, float, int | None] | None:
    """(time us, algbw, busbw, #wrong) of one half; None where nccl-tests wrote null."""
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ParseError(f"nccl-tests JSON: {name} is not an object")
    time = data.get("time", data.get("cpu_time"))
    wrong = data.get("nwrong")
    return (_number(time, f"{name} time"), _number(data.get("alg_bw"), f"{name} alg_bw"),
            _number(data.get("bus_bw"), f"{name} bus_bw"),
            None if wrong is None else _int(_number(wrong, f"{name} nwrong"), f"{name} nwrong", minimum=0))


def _summary(run: _Run, document: dict[str, Any]) -> None:
    bounds = document.get("out_of_bounds") if isinstance(document.get("out_of_bounds"), dict) else {}
    run.out_of_bounds = _int(bounds.get("count", 0), "out_of_bounds count", minimum=0)
    average = document.get("average_bus_bandwidth")
    if isinstance(average, dict) and average.get("bandwidth") is not None:
        run.avg = _number(average["bandwidth"], "average_bus_bandwidth")
        run.avg_failed = _flag(average.get("okay")) is False


def _per_iteration(data: dict[str, Any]) -> dict[str, Any]:
    summary: dict[str, Any] = {key: _number(data[key], key) for key in PER_ITERATION if data.get(key) is not None}
    processes = data.get("per_process_max_times_us")
    if isinstance(processes, list) and len(processes) > 1:
        medians = [statistics.median([_number(v, "per-process time") for v in times]) for times in processes
                   if isinstance(times, list) and times]
        if len(medians) > 1:
            slowest = max(range(len(medians)), key=medians.__getitem__)
            typical = statistics.median(medians)
            summary["process_median_us"] = medians
            summary["slowest_process"] = {"index": slowest, "median_us": medians[slowest],
                                          "ratio_to_median": medians[slowest] / typical if typical > 0 else None}
    return summary


def _iteration_summary(iterations: dict[int, dict[str, Any]], largest: int) -> dict[str, Any]:
    return {"is": "nccl-tests -I 1 per-iteration summaries (times in us; each iteration's time is the "
                  "slowest process's; cv_pct: coefficient of variation, %); slowest_process: the process whose "
                  "median per-iteration time is highest, and its ratio to the median process",
            "largest": iterations.get(largest), "sizes": {str(size): value for size, value in iterations.items()}}


def _program(args: Any) -> str | None:
    if isinstance(args, list) and args and isinstance(args[0], str):
        found = TEST_NAME.search(args[0][-200:])
        return found.group("name") if found else None
    return None


def _errors(errors: Any) -> list[str]:
    """nccl-tests' errors, without the empty string it writes when there are none."""
    if not isinstance(errors, list):
        return []
    return [plain(error, newlines=False)[:200] for error in errors if isinstance(error, str) and error.strip()]


def _flag(value: Any) -> bool | None:
    """A boolean nccl-tests wrote as true/false or as the string "true"/"false"; None for anything else."""
    if isinstance(value, bool):
        return value
    return {"true": True, "false": False}.get(value.strip()) if isinstance(value, str) else None


def _number(value: Any, what: str) -> float:
    if isinstance(value, str):  # nccl-tests writes some numbers as padded strings
        return read_float(value, f"nccl-tests JSON {what}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParseError(f"nccl-tests JSON {what}: {str(value)[:30]!r} is not a number")
    return read_float(repr(float(value)), f"nccl-tests JSON {what}")


def _int(value: Any, what: str, minimum: int = 0) -> int | None:
    if value is None:
        return None
    number = _number(value, what)
    if number != int(number) or number < minimum or abs(number) > 2**53:
        raise ParseError(f"nccl-tests JSON {what}: {number!r} is not a whole number >= {minimum}")
    return int(number)


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ParseError(f"nccl-tests JSON {what} is not a name")
    return plain(value.strip(), newlines=False)[:200]


def _short(value: Any) -> str | None:
    return plain(value, newlines=False).strip()[:200] if isinstance(value, str) else None
