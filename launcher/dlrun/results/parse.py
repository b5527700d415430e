"""Parsers: benchmark output text -> normalised results.

Supported: the dlrun harness (`DLRUN_RESULT {json}`) and tf_cnn_benchmarks (`total images/sec: N` plus its
header). Under Horovod every tf_cnn_benchmarks rank prints its own header and its own estimate of the job
total (`num_workers * local_steps * batch / elapsed`); lines may arrive interleaved and, with
`mpirun --tag-output`, prefixed `[1,R]<stdout>:`. We report the job value once: rank 0's when ranks are
tagged, else the first one printed, and keep every rank's estimate alongside.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from dlrun.errors import DlrunError

RESULT_PREFIX = "DLRUN_RESULT "
TAG = re.compile(r"^\[(?:\d+),(?P<rank>\d+)\]<std(?:out|err)>:\s?")
TOTAL = re.compile(r"total images/sec:\s*(?P<value>[0-9.]+(?:[eE][-+]?\d+)?)")


class ParseError(DlrunError):
    exit_code = 1


@dataclass
class ParsedResult:
    kind: str
    metric: str
    value: float
    unit: str
    model: str | None = None
    batch_size: int | None = None  # per device/rank
    num_devices: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _untag(line: str) -> tuple[int | None, str]:
    match = TAG.match(line)
    if match:
        return int(match.group("rank")), line[match.end():]
    return None, line


def parse_dlrun(text: str) -> ParsedResult | None:
    records = []
    for raw in text.splitlines():
        _, line = _untag(raw)
        if line.startswith(RESULT_PREFIX):
            try:
                records.append(json.loads(line[len(RESULT_PREFIX):]))
            except json.JSONDecodeError as exc:
                raise ParseError(f"malformed {RESULT_PREFIX.strip()} line: {exc}") from None
    if not records:
        return None
    if len(records) > 1:
        raise ParseError(f"expected one {RESULT_PREFIX.strip()} line, found {len(records)}")
    rec = records[0]
    return ParsedResult(
        kind="dlrun-harness",
        metric=rec.get("metric", "throughput"),
        value=float(rec["value"]),
        unit=rec.get("unit", "images/sec"),
        model=rec.get("model"),
        batch_size=rec.get("batch_size_per_rank"),
        num_devices=rec.get("world_size"),
        extra=rec,
    )


def _header_value(lines: list[str], key: str) -> str | None:
    for line in lines:
        if line.startswith(key):
            return line[len(key):].strip()
    return None


def parse_tf_cnn_benchmarks(text: str) -> ParsedResult | None:
    by_rank: dict[int | None, list[str]] = {}
    totals: list[tuple[int | None, float]] = []
    for raw in text.splitlines():
        rank, line = _untag(raw)
        by_rank.setdefault(rank, []).append(line)
        match = TOTAL.search(line)
        if match:
            totals.append((rank, float(match.group("value"))))
    if not totals:
        return None
    tagged = {rank for rank, _ in totals if rank is not None}
    chosen_rank, value = min(totals, key=lambda item: (item[0] is None, item[0] or 0)) if tagged else totals[0]
    lines = by_rank.get(chosen_rank, [])
    model = _header_value(lines, "Model:")
    per_device = None
    global_batch = None
    for index, line in enumerate(lines):
        match = re.match(r"Batch size:\s+(\d+)\s+global", line)
        if match:
            global_batch = int(match.group(1))
            if index + 1 < len(lines):
                per = re.match(r"\s*(\d+(?:\.\d+)?)\s+per device", lines[index + 1])
                if per:
                    per_device = int(float(per.group(1)))
            break
    devices_text = _header_value(lines, "Devices:")
    devices_per_report = 1
    if devices_text:
        try:
            devices_per_report = len(ast.literal_eval(devices_text))
        except (ValueError, SyntaxError):
            devices_per_report = devices_text.count(",") + 1
    variables = _header_value(lines, "Variables:")
    reports = len(tagged) if tagged else len(totals)
    horovod = variables == "horovod" or (devices_text or "").find("horovod") >= 0
    num_devices = devices_per_report * (reports if horovod else 1)
    return ParsedResult(
        kind="tf_cnn_benchmarks",
        metric="throughput",
        value=value,
        unit="images/sec",
        model=model,
        batch_size=per_device if per_device is not None else global_batch,
        num_devices=num_devices,
        extra={"reports": [v for _, v in totals], "variables": variables,
               "global_batch_size_per_worker": global_batch, "devices": devices_text},
    )


PARSERS = (parse_dlrun, parse_tf_cnn_benchmarks)


def parse_text(text: str) -> ParsedResult:
    for parser in PARSERS:
        result = parser(text)
        if result is not None:
            return result
    raise ParseError("no result found: expected a dlrun 'DLRUN_RESULT {...}' line or "
                     "tf_cnn_benchmarks 'total images/sec: N'")
