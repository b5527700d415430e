"""fio `--output-format=json` (and `json+`): one JSON object with `"fio version"` and `"jobs"`, possibly after
lines fio prints first (`note: ...`). Each job is a result: its bandwidth over the directions it did I/O in
(read, write, trim), in GB/s (10^9 bytes/s), from `bw_bytes` (fio 3.x; older releases give only `bw` in KiB/s,
read as x 1024), with IOPS, the mean completion latency and the bytes moved per direction in `extra`, and
whether the page cache was bypassed (`direct`) or not, from the job's or the global options. A job whose
`error` is not 0 is returned with that as a problem.
"""
from __future__ import annotations

import itertools
import json
from typing import Any

from dlrun.results.parsers.common import Log, LogFile
from dlrun.results.parsers.result import ParsedResult, ParseError, check_rate

NAME = "fio"
DESCRIPTION = "fio --output-format=json: `{\"fio version\": ..., \"jobs\": [...]}`"
DIRECTIONS = ("read", "write", "trim")
MAX_JOBS = 1024


def _from_file(log: LogFile) -> str | None:
    """The log from the first line that opens a JSON object naming `fio version` (in its first 200
    characters) to its end, as one text; None without one. Read a line at a time up to there."""
    for number, line in enumerate(log):
        if line.startswith("{"):
            head = ""
            for later in itertools.islice(log, number, None):
                head += later + "\n"
                if len(head) >= 200:
                    break
            return log.text(number) if '"fio version"' in head[:200] else None
    return None


def _document(text: Log) -> dict[str, Any] | None:
    """fio's JSON object: from the first line that opens one to the end of the text."""
    if isinstance(text, LogFile):
        text = _from_file(text)
        if text is None:
            return None
    start = 0
    while True:
        start = text.find("{", start)
        if start < 0:
            return None
        if start == 0 or text[start - 1] == "\n":
            break
        start += 1
    if '"fio version"' not in text[start:start + 200]:
        return None
    try:  # the object alone: fio may print more after it
        document, _ = json.JSONDecoder().raw_decode(text, start)
    except RecursionError:
        raise ParseError("fio JSON output: nested too deeply") from None
    except ValueError as exc:
        raise ParseError(f"fio JSON output: malformed JSON: {str(exc)[:120]}") from None
    if not isinstance(document, dict) or not isinstance(document.get("jobs"), list):
        raise ParseError("fio JSON output has no \"jobs\" list")
    return document


def parse(text: str) -> list[ParsedResult]:
    document = _document(text)
    if document is None:
        return []
    jobs = document["jobs"]
    if not jobs:
        raise ParseError("fio JSON output lists no jobs")
    if len(jobs) > MAX_JOBS:
        raise ParseError(f"fio JSON output lists {len(jobs)} jobs, more than {MAX_JOBS}")
    options = document.get("global options") if isinstance(document.get("global options"), dict) else {}
    return [_job(job, options, str(document.get("fio version"))[:40]) for job in jobs]


def _direction(stats: Any, name: str, job: str) -> dict[str, Any] | None:
    """One direction's figures, or None where the job did no I/O in it."""
    if not isinstance(stats, dict):
        return None
    io_bytes = stats.get("io_bytes", 0)
    if not isinstance(io_bytes, (int, float)) or io_bytes <= 0:
        return None
    if "bw_bytes" in stats:
        bw = check_rate(f"fio {job} {name} bw_bytes", stats["bw_bytes"])
    else:  # fio 2.x: KiB/s
        bw = check_rate(f"fio {job} {name} bw", stats.get("bw")) * 1024
    lat = stats.get("clat_ns") if isinstance(stats.get("clat_ns"), dict) else {}
    mean = lat.get("mean")
    return {"bytes": int(check_rate(f"fio {job} {name} io_bytes", io_bytes)), "bw_bytes_per_s": bw,
            "iops": check_rate(f"fio {job} {name} iops", stats.get("iops", 0)),
            "clat_mean_us": check_rate(f"fio {job} {name} clat mean", mean) / 1000 if mean is not None else None}


def _job(job: Any, global_options: dict[str, Any], version: str) -> ParsedResult:
    if not isinstance(job, dict):
        raise ParseError("fio JSON output: a job is not an object")
    name = str(job.get("jobname", "?"))[:200]
    options = job.get("job options") if isinstance(job.get("job options"), dict) else {}
    directions = {d: figures for d in DIRECTIONS if (figures := _direction(job.get(d), d, name))}
    problems = []
    if job.get("error") not in (0, None):
        problems.append(f"fio job {name} ended with error {str(job.get('error'))[:40]}")
    if not directions:
        problems.append(f"fio job {name} moved no bytes")
    total = sum(figures["bw_bytes_per_s"] for figures in directions.values())
    direct = options.get("direct", global_options.get("direct"))
    buffered = {"1": "O_DIRECT (page cache bypassed)", "0": "buffered (through the page cache)"}
    extra = {"fio_version": version, "jobname": name, "rw": options.get("rw", global_options.get("rw")),
             "bs": options.get("bs", global_options.get("bs")),
             "ioengine": options.get("ioengine", global_options.get("ioengine")),
             "cache": buffered.get(str(direct), "buffered (fio's default; direct not set)"),
             "directions": directions, "iops": sum(f["iops"] for f in directions.values()),
             "value_is": "bandwidth of job %s, %s (bw_bytes / 1e9)"
                         % (name, " + ".join(directions) or "no direction")}
    return ParsedResult(kind=NAME, metric="bandwidth", value=total / 1e9, unit="GB/s", model=None,
                        problems=tuple(problems), extra=extra, value_is=extra["value_is"])
