"""tf_cnn_benchmarks: `total images/sec: N` plus the header (Model, Batch size, Devices, Variables).

Under Horovod every rank prints its own header and its own estimate of the job total
(`num_workers * local_steps * batch / elapsed`); lines may arrive interleaved and, with `mpirun --tag-output`,
prefixed `[1,R]<stdout>:`. We report the job value once: rank 0's when ranks are tagged, else the first one
printed, and keep every rank's estimate alongside.
"""
from __future__ import annotations

import re

from dlrun.results.parsers.common import NUMBER, first_rank, read_float, read_int, tagged_lines
from dlrun.results.parsers.model import ParsedResult

NAME = "tf_cnn_benchmarks"
DESCRIPTION = "tf_cnn_benchmarks: `total images/sec: N` and its header"
TOTAL = re.compile(rf"total images/sec:\s*(?P<value>{NUMBER})")
GLOBAL_BATCH = re.compile(r"^Batch size:\s+(\d+)\s+global")
PER_DEVICE = re.compile(r"^\s*(\d+)(?:\.0*)?\s+per device")
QUOTED = re.compile(r"'([^'\n]{0,200})'")


def _header_value(lines: list[str], key: str) -> str | None:
    for line in lines:
        if line.startswith(key):
            return line[len(key):].strip()[:1000]
    return None


def parse(text: str) -> list[ParsedResult]:
    by_rank: dict[int | None, list[str]] = {}
    totals: list[tuple[int | None, float]] = []
    for rank, line in tagged_lines(text):
        by_rank.setdefault(rank, []).append(line)
        match = TOTAL.search(line)
        if match:
            totals.append((rank, read_float(match.group("value"), "tf_cnn_benchmarks total images/sec")))
    if not totals:
        return []
    tagged = {rank for rank, _ in totals if rank is not None}
    chosen_rank, value = first_rank(totals)
    lines = by_rank.get(chosen_rank, [])
    per_device = global_batch = None
    for index, line in enumerate(lines):
        match = GLOBAL_BATCH.match(line)
        if match:
            global_batch = read_int(match.group(1), "tf_cnn_benchmarks global batch size")
            per = PER_DEVICE.match(lines[index + 1]) if index + 1 < len(lines) else None
            if per:
                per_device = read_int(per.group(1), "tf_cnn_benchmarks batch size per device")
            break
    devices_text = _header_value(lines, "Devices:")
    # Count the quoted device names rather than evaluating the list: the header is text, not Python.
    devices_per_report = len(QUOTED.findall(devices_text)) if devices_text else 0
    variables = _header_value(lines, "Variables:")
    reports = len(tagged) if tagged else len(totals)
    horovod = variables == "horovod" or "horovod" in (devices_text or "")
    num_devices = devices_per_report * (reports if horovod else 1) if devices_per_report else None
    return [ParsedResult(
        kind=NAME, metric="throughput", value=value, unit="images/sec",
        model=_header_value(lines, "Model:") or None,
        batch_size=per_device if per_device is not None else global_batch,
        num_devices=num_devices,
        num_ranks=reports if horovod else (1 if devices_per_report else None),
        extra={"reports": [v for _, v in totals], "variables": variables,
               "global_batch_size_per_worker": global_batch, "devices": devices_text,
               "tensorflow": _header_value(lines, "TensorFlow:")},
    )]
