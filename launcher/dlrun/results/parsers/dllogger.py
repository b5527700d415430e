"""NVIDIA DeepLearningExamples dllogger JSON lines: `DLLL {"timestamp": ..., "type": "LOG", "step": ..., "data": {...}}`.

dllogger's JSON backend writes one `DLLL` line per call: `"type": "METADATA"` lines give each metric's unit,
`"type": "LOG"` lines carry the values; the run's summary is logged with an empty step (`"step": []`).
We report the summary's training throughput when there is one, else the last logged one.
"""
from __future__ import annotations

from typing import Any

from dlrun.results.parsers.common import json_records
from dlrun.results.parsers.model import ParsedResult, ParseError, check_rate

NAME = "dllogger"
DESCRIPTION = "NVIDIA DeepLearningExamples dllogger: `DLLL {json}` lines"
PREFIX = "DLLL "
#: Training-throughput keys of the DeepLearningExamples models, with the unit each one counts.
THROUGHPUT_KEYS = {
    "train.total_ips": "images/sec", "train.compute_ips": "images/sec", "total_ips": "images/sec",
    "train_throughput": "images/sec", "throughput_train": "sequences/sec",
    "training_sequences_per_second": "sequences/sec", "train.throughput": "samples/sec",
    "throughput": "samples/sec", "train_items_per_sec": "samples/sec", "tokens_per_sec": "tokens/sec",
}
UNIT_SPELLINGS = {"img/s": "images/sec", "images/s": "images/sec", "images/sec": "images/sec",
                  "sequences/s": "sequences/sec", "sequences/sec": "sequences/sec", "seq/s": "sequences/sec",
                  "samples/s": "samples/sec", "samples/sec": "samples/sec", "tokens/s": "tokens/sec"}


def parse(text: str) -> list[ParsedResult]:
    units: dict[str, str] = {}
    found: list[tuple[bool, str, Any]] = []  # (from the summary, key, value)
    lines = 0
    for record in json_records(text, PREFIX, "DLLL line"):
        lines += 1
        if not isinstance(record, dict):
            continue  # a line cut by another process's output; the summary is what counts
        if record.get("type") == "METADATA" and isinstance(record.get("metadata"), dict):
            unit = UNIT_SPELLINGS.get(str(record["metadata"].get("unit")))
            if unit and isinstance(record.get("metric"), str):
                units[record["metric"]] = unit
        data = record.get("data")
        if record.get("type") == "LOG" and isinstance(data, dict):
            for key in THROUGHPUT_KEYS:
                if key in data:
                    found.append((record.get("step") in ([], ()), key, data[key]))
    if not lines:
        return []
    if not found:
        raise ParseError(f"dllogger log ({lines} DLLL lines) has no training throughput; looked for "
                         + ", ".join(THROUGHPUT_KEYS))
    summary = [item for item in found if item[0]]
    _, key, value = (summary or found)[-1]
    return [ParsedResult(kind=NAME, metric="throughput", value=check_rate(key, value),
                         unit=units.get(key, THROUGHPUT_KEYS[key]),
                         extra={"key": key, "from_summary": bool(summary), "dlll_lines": lines},
                         value_is=f"{key} of the " + ("summary line" if summary else "last line that logs it"))]
