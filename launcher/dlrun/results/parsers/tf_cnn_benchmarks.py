"""tf_cnn_benchmarks: `total images/sec: N` plus the header (Model, Dataset, Mode, Batch size, Devices, Data
format, Variables, AllReduce).

Under Horovod every rank prints its own header and its own estimate of the job total
(`num_workers * local_steps * batch / elapsed`); lines may arrive interleaved and, with `mpirun --tag-output`,
prefixed `[1,R]<stdout>:`. We report the job value once: rank 0's when ranks are tagged, else the first one
printed, and keep every rank's estimate alongside.

How many devices trained is read from the header's batch line: tf_cnn_benchmarks prints the global batch and
`global // len(local devices)` per device (benchmark_cnn.py, print_info), so global / per device counts the
devices of every worker. The `Devices:` list alone lists one worker's devices, except under Horovod, where it
lists one `horovod/gpu:i` per worker. `Dataset: imagenet (synthetic)` means random tensors, `Dataset:
imagenet` ImageNet read as TFRecord files; `Mode: forward-only` measured inference, which is flagged.
"""
from __future__ import annotations

import re

from dlrun.results.parsers.common import NUMBER, Log, first_rank, read_float, read_int, tagged_lines
from dlrun.results.parsers.result import ParsedResult

NAME = "tf_cnn_benchmarks"
DESCRIPTION = "tf_cnn_benchmarks: `total images/sec: N` and its header"
TOTAL = re.compile(rf"total images/sec:\s*(?P<value>{NUMBER})")
GLOBAL_BATCH = re.compile(r"^Batch size:\s+(\d+)\s+global")
PER_DEVICE = re.compile(r"^\s*(\d+)(?:\.0*)?\s+per device")
QUOTED = re.compile(r"'([^'\n]{0,200})'")
#: Header lines kept with the result, by the key they are stored under.
HEADER = {"model": "Model:", "dataset": "Dataset:", "mode": "Mode:", "devices": "Devices:",
          "data_format": "Data format:", "variables": "Variables:", "all_reduce": "AllReduce:",
          "tensorflow": "TensorFlow:"}


HEADER_KEYS = tuple(HEADER.values())
#: Stands for the line after a batch line until it is read.
BATCH_PENDING = "\x00batch line pending"


def _header_value(lines: list[str], key: str) -> str | None:
    for line in lines:
        if line.startswith(key):
            return line[len(key):].strip()[:1000] or None
    return None


def _batch(lines: list[str]) -> tuple[int | None, int | None]:
    """(global batch, batch per device) from `Batch size:  N global` and the line after it."""
    for index, line in enumerate(lines):
        match = GLOBAL_BATCH.match(line)
        if match:
            per = PER_DEVICE.match(lines[index + 1]) if index + 1 < len(lines) else None
            return (read_int(match.group(1), "tf_cnn_benchmarks global batch size"),
                    read_int(per.group(1), "tf_cnn_benchmarks batch size per device") if per else None)
    return None, None


def _data_source(dataset: str | None) -> str | None:
    if dataset is None:
        return None
    if dataset.endswith("(synthetic)"):
        return "synthetic"
    return "tfrecord" if dataset == "imagenet" else None  # tf_cnn_benchmarks reads ImageNet as TFRecord files


def _keep(kept: list[str], line: str) -> None:
    """Keep of a rank's line what the header is read from: the first line of each key, the first batch line
    and the line after it (nothing else: a log is read a line at a time)."""
    if kept and kept[-1] is BATCH_PENDING:
        kept[-1] = line
    elif GLOBAL_BATCH.match(line) and not any(GLOBAL_BATCH.match(seen) for seen in kept):
        kept += [line, BATCH_PENDING]
    elif line.startswith(HEADER_KEYS) and not any(seen.startswith(line.split(":", 1)[0] + ":") for seen in kept):
        kept.append(line)


def parse(text: Log) -> list[ParsedResult]:
    by_rank: dict[int | None, list[str]] = {}
    totals: list[tuple[int | None, float]] = []
    at: list[int] = []  # the line number of each total
    for number, (rank, line) in enumerate(tagged_lines(text), 1):
        _keep(by_rank.setdefault(rank, []), line)
        match = TOTAL.search(line)
        if match:
            totals.append((rank, read_float(match.group("value"), "tf_cnn_benchmarks total images/sec")))
            at.append(number)
    if not totals:
        return []
    chosen_rank, value = first_rank(totals)
    chosen_line = at[totals.index((chosen_rank, value))]
    lines = by_rank.get(chosen_rank, [])
    header = {name: _header_value(lines, key) for name, key in HEADER.items()}
    global_batch, per_device = _batch(lines)
    devices, processes = _counts(header, global_batch, per_device, totals)
    problems = []
    if header["mode"] not in (None, "training"):
        problems.append(f"tf_cnn_benchmarks ran in mode {header['mode'][:40]}: its images/sec is not a training "
                        "throughput")
    return [ParsedResult(
        kind=NAME, metric="throughput", value=value, unit="images/sec",
        model=header["model"][:200] if header["model"] else None,
        batch_size=per_device if per_device is not None else global_batch,
        num_devices=devices, num_ranks=processes, problems=tuple(problems),
        extra={"reports": [v for _, v in totals], "variables": header["variables"],
               "global_batch_size": global_batch, "devices": header["devices"],
               "tensorflow": header["tensorflow"], "dataset": header["dataset"], "mode": header["mode"],
               "data_source": _data_source(header["dataset"]), "data_format": header["data_format"],
               "all_reduce_spec": header["all_reduce"]},
        value_is=_which(totals, at, chosen_rank, chosen_line, horovod=processes is not None and processes > 1),
    )]


def _which(totals: list[tuple[int | None, float]], at: list[int], rank: int | None, line: int, *,
           horovod: bool) -> str:
    """Which `total images/sec` line the value is, and what the log's others are."""
    said = "the `total images/sec` line" + (f" of rank {rank}" if rank is not None else "")
    if len(totals) == 1:
        return said + f" (line {line})"
    if horovod or any(r is not None for r, _ in totals):
        return said + (f" (each of the {len(totals)} reports is one worker's estimate of the job total; all are "
                       f"kept in `reports`; this one is line {line})")
    others = ", ".join(f"line {n}: {v:g}" for n, (_, v) in zip(at, totals) if n != line)[:200]
    return (f"the first of {len(totals)} `total images/sec` lines (line {line}; the others, {others}, are "
            "kept in `reports`): a log of several runs? split it to import each")


def _counts(header: dict[str, str | None], global_batch: int | None, per_device: int | None,
            totals: list[tuple[int | None, float]]) -> tuple[int | None, int | None]:
    """(devices, processes): global batch over per-device batch, else the Devices list."""
    # Count the quoted device names rather than evaluating the list: the header is text, not Python.
    listed = len(QUOTED.findall(header["devices"])) if header["devices"] else 0
    horovod = header["variables"] == "horovod" or "horovod" in (header["devices"] or "")
    devices = (global_batch // per_device if global_batch and per_device and global_batch % per_device == 0
               else listed or None)
    tagged = {rank for rank, _ in totals if rank is not None}
    reports = len(tagged) if tagged else len(totals)
    return devices, (listed or reports) if horovod else (1 if listed else None)
