"""A storage workload's result: the harness's storage reader's `DLRUN_RESULT` line, and where fio did the
reading, fio's own JSON document read by dlrun's fio parser, whose read bandwidth is the stored value (the
reader's line then says how the page cache was handled and which file system it read)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from dlrun.results.parsers import ParseError, ParsedResult, parse_all
from dlrun.results.parsers.common import read_json, tagged_lines
from dlrun.results.parsers.dlrun_harness import PREFIX


def reader_record(text: str) -> dict[str, Any] | None:
    """The reader's one DLRUN_RESULT object in `text`, or None."""
    lines = [line[len(PREFIX):] for _, line in tagged_lines(text) if line.startswith(PREFIX)]
    if len(lines) != 1:
        return None
    record = read_json(lines[0], f"{PREFIX.strip()} line")
    return record if isinstance(record, dict) else None


def fio_storage_result(text: str, record: dict[str, Any]) -> ParsedResult:
    """fio's sequential read job as the storage result: its read bandwidth (fio's bw_bytes / 1e9)."""
    jobs = parse_all(text, "fio")
    if len(jobs) != 1:
        raise ParseError(f"the storage reader ran one fio job, but fio's output holds {len(jobs)}")
    job = jobs[0]
    read = job.extra.get("directions", {}).get("read")
    if read is None:
        raise ParseError("fio's job read nothing: no read bandwidth to store")
    extra = {**record, "fio": {k: job.extra.get(k) for k in ("fio_version", "bs", "ioengine", "cache", "iops")},
             "bytes_read": read["bytes"]}
    result = ParsedResult(kind="fio", metric="read_bandwidth", value=read["bw_bytes_per_s"] / 1e9, unit="GB/s",
                          model=None, num_devices=record.get("num_devices"), num_ranks=record.get("world_size"),
                          problems=job.problems, extra=extra,
                          value_is="fio's sequential read bandwidth of the largest file (read bw_bytes / 1e9)")
    return replace(result, extra={**extra, "value_is": result.value_is})


def storage_result(texts: list[str]) -> tuple[dict[str, Any] | None, Any, str | None]:
    """(result dict, parsed, error) of a storage run, from the first text holding the reader's line."""
    error = "no DLRUN_RESULT line of the storage reader was found"
    for text in texts:
        try:
            record = reader_record(text)
            if record is None:
                continue
            parsed = (fio_storage_result(text, record) if record.get("reader") == "fio"
                      else parse_all(text, "dlrun-harness")[0])
            return parsed.to_dict(), parsed, None
        except ParseError as exc:
            error = str(exc)
    return None, None, error
