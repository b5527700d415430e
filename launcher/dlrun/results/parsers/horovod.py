"""Horovod's synthetic benchmarks (pytorch_ / tensorflow_ / tensorflow2_synthetic_benchmark.py).

Rank 0 prints `Model:`, `Batch size:` (per device), `Number of GPUs:`, one `Iter #i: X img/sec per GPU`
line per timed iteration and `Total img/sec on N GPU(s): X +-Y`, the job total (N x the per-device mean).
These benchmarks train on random tensors and have no other input: the result says `data_source: synthetic`.
"""
from __future__ import annotations

import re

from dlrun.results.parsers.common import NUMBER, first_rank, read_float, read_int, tagged_lines
from dlrun.results.parsers.result import ParsedResult

NAME = "horovod"
DESCRIPTION = "Horovod synthetic benchmarks: `Total img/sec on N GPU(s): X +-Y`"
TOTAL = re.compile(rf"Total img/sec on (?P<n>\d+) (?P<device>[A-Za-z]+)\(s\):\s*(?P<value>{NUMBER})"
                   rf"(?:\s*\+-\s*(?P<conf>{NUMBER}))?")
PER_DEVICE = re.compile(rf"^Img/sec per (?P<device>[A-Za-z]+):\s*(?P<value>{NUMBER})")
ITER = re.compile(rf"^Iter #\d+:\s*(?P<value>{NUMBER}) img/sec per")
MODEL = re.compile(r"^Model:\s*(\S{1,200})\s*$")
BATCH = re.compile(r"^Batch size:\s*(\d+)\s*$")


def parse(text: str) -> list[ParsedResult]:
    totals: list[tuple[int | None, re.Match]] = []
    model = batch = per_device = None
    iters: list[float] = []
    for rank, line in tagged_lines(text):
        match = TOTAL.search(line)
        if match:
            totals.append((rank, match))
        elif model is None and (match := MODEL.match(line)):
            model = match.group(1)
        elif batch is None and (match := BATCH.match(line)):
            batch = read_int(match.group(1), "Horovod batch size")
        elif per_device is None and (match := PER_DEVICE.match(line)):
            per_device = read_float(match.group("value"), "Horovod img/sec per device")
        elif match := ITER.match(line):
            iters.append(read_float(match.group("value"), "Horovod img/sec of one iteration"))
    if not totals:
        return []
    _, total = first_rank(totals)
    conf = total.group("conf")
    return [ParsedResult(
        kind=NAME, metric="throughput", unit="images/sec",
        value=read_float(total.group("value"), "Horovod total img/sec"),
        model=model, batch_size=batch,
        num_devices=read_int(total.group("n"), "Horovod device count"),
        num_ranks=read_int(total.group("n"), "Horovod device count"), gpus_per_rank=1,
        extra={"device": total.group("device"), "per_device": per_device, "iterations": iters,
               "confidence_95": read_float(conf, "Horovod confidence interval") if conf else None,
               "reports": len(totals), "data_source": "synthetic"},
        value_is=f"the job total `Total img/sec on {total.group('n')} {total.group('device')}(s)`"
                 + (" of the lowest rank that printed one" if len(totals) > 1 else ""),
    )]
