"""What a parser returns: a result that cannot hold nonsense, and the one error type parsers raise.

Every value is checked when the result is built: throughputs and bandwidths are finite and not negative,
a result's own figure above zero (`-0` and `0` measure nothing), counts are positive integers, units come
from a fixed set. A parser that meets anything else raises
ParseError, so a log can never put NaN, a negative rate or a 4,300-digit count into the result store.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from dlrun.errors import DlrunError

#: Units a result may carry (what each tool prints, normalised).
UNITS = ("images/sec", "sequences/sec", "samples/sec", "tokens/sec", "GB/s", "us", "files/s")
#: Metrics a result may carry: training throughput, nccl-tests bus bandwidth, and what bring-your-own tools
#: report: point-to-point or storage bandwidth (OSU, fio; GB/s) and latency (OSU; microseconds); a storage
#: workload's sequential read bandwidth (GB/s) and small-file read rate (files/s).
METRICS = ("throughput", "busbw", "bandwidth", "latency", "read_bandwidth", "file_read_rate")
#: Result rows a training run stores beside its throughput (dlrun.execute.record.secondary_rows): MFU against
#: the device's peak and against the measured matmul ceiling, checkpoint seconds and GB/s. Never the primary.
SECONDARY_METRICS = {"mfu_peak": "fraction", "mfu_matmul": "fraction", "checkpoint_seconds": "s",
                     "checkpoint_gbs": "GB/s"}
MAX_TEXT = 200  # names (model, collective, data type) longer than this are not names
MAX_VALUE_IS = 400  # the sentence saying which printed figure a result took


class ParseError(DlrunError):
    """The only error parsers raise: the log holds no result, or a result that cannot be right."""

    exit_code = 1


def check_rate(name: str, value: Any) -> float:
    """A throughput, bandwidth or time: a real number, finite and >= 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParseError(f"{name} must be a number, got {_show(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise ParseError(f"{name} is too large to be a measurement: {_show(value)}") from None
    if not math.isfinite(number) or number < 0:
        raise ParseError(f"{name} must be finite and >= 0, got {_show(value)}")
    return number


def check_measured(name: str, value: Any) -> float:
    """A result's figure: a rate (`check_rate`) above zero. Zero, and the `-0` a tool prints for it, say that
    nothing was measured (a job that did no work in its timed steps, a collective over one rank): the run
    failed, whatever else the log says."""
    number = check_rate(name, value)
    if not number > 0:
        raise ParseError(f"{name} is {_show(value)}: a zero figure measures nothing; the run is a failed run")
    return number


def check_count(name: str, value: Any, minimum: int = 1) -> int | None:
    """A count (devices, ranks, batch size): None when unknown, else an integer >= minimum."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParseError(f"{name} must be an integer, got {_show(value)}")
    if value < minimum or value > 2**53:
        raise ParseError(f"{name} must be between {minimum} and 2**53, got {_show(value)}")
    return value


def check_name(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise ParseError(f"{name} must be a short text, got {_show(value)}")
    return value


def non_finite(data: Any, where: str = "") -> str | None:
    """The path (`a.b[2]`) of the first float in `data` that is NaN or infinite, else None."""
    if isinstance(data, float) and not math.isfinite(data):
        return where or "value"
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, (list, tuple)) else ()
    for key, value in items:
        found = non_finite(value, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}".lstrip("."))
        if found is not None:
            return found
    return None


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class SizeRow:
    """One message size of an nccl-tests table, out-of-place and in-place as nccl-tests prints them.

    `*_wrong` is the `#wrong` column (elements with wrong values; None where nccl-tests printed N/A);
    older nccl-tests print an `error` column (largest numeric error) instead, kept in `*_error`."""

    size_bytes: int
    count: int
    type: str
    redop: str | None
    root: int | None
    oop_time_us: float
    oop_algbw: float
    oop_busbw: float
    ip_time_us: float
    ip_algbw: float
    ip_busbw: float
    oop_wrong: int | None = None
    ip_wrong: int | None = None
    oop_error: float | None = None
    ip_error: float | None = None

    def __post_init__(self) -> None:
        check_count("message size", self.size_bytes, minimum=0)
        check_count("element count", self.count, minimum=0)
        check_name("data type", self.type)
        check_name("reduction", self.redop)
        if self.root is not None and (isinstance(self.root, bool) or not isinstance(self.root, int)
                                      or not -1 <= self.root <= 2**31):
            raise ParseError(f"root must be -1 or a rank, got {_show(self.root)}")
        for name in ("oop_time_us", "oop_algbw", "oop_busbw", "ip_time_us", "ip_algbw", "ip_busbw"):
            object.__setattr__(self, name, check_rate(name, getattr(self, name)))
        for name in ("oop_wrong", "ip_wrong"):
            check_count(name, getattr(self, name), minimum=0)
        for name in ("oop_error", "ip_error"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check_rate(name, getattr(self, name)))


@dataclass(frozen=True)
class ParsedResult:
    """One result extracted from a log.

    devices = ranks x gpus_per_rank (nccl-tests `-g`, several GPUs per process); hosts are the machines the
    ranks ran on, in the order the log lists them, so a run that was secretly single-node shows it.
    `problems` lists what makes the numbers untrustworthy (wrong elements, an average that disagrees with
    the table); a result with problems is still returned so that it can be looked at, never silently used.
    `value_is` says which printed figure `value` is (a log often prints several: per step, per epoch, a
    summary, compute-only and end-to-end rates), in words, so that the number can be checked in the log."""

    kind: str
    metric: str
    value: float
    unit: str
    model: str | None = None
    batch_size: int | None = None  # per device/rank
    num_devices: int | None = None
    num_ranks: int | None = None
    gpus_per_rank: int | None = None
    hosts: tuple[str, ...] = ()
    collective: str | None = None
    sizes: tuple[SizeRow, ...] = ()
    avg_busbw: float | None = None
    problems: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    value_is: str = ""

    def __post_init__(self) -> None:
        check_name("kind", self.kind)
        if self.metric not in METRICS:
            raise ParseError(f"metric {_show(self.metric)} is not one of {', '.join(METRICS)}")
        if self.unit not in UNITS:
            raise ParseError(f"unit {_show(self.unit)} is not one of {', '.join(UNITS)}")
        object.__setattr__(self, "value", check_measured(f"{self.metric} value", self.value))
        check_name("model", self.model)
        check_name("collective", self.collective)
        for name in ("batch_size", "num_devices", "num_ranks", "gpus_per_rank"):
            check_count(name, getattr(self, name))
        for host in self.hosts:
            check_name("host", host)
        if self.avg_busbw is not None:
            object.__setattr__(self, "avg_busbw", check_rate("average bus bandwidth", self.avg_busbw))
        if not isinstance(self.extra, dict):
            raise ParseError(f"extra must be a mapping, got {_show(self.extra)}")
        if not isinstance(self.value_is, str) or not self.value_is.strip() or len(self.value_is) > MAX_VALUE_IS:
            raise ParseError(f"value_is must say which printed figure the value is, got {_show(self.value_is)}")
        where = non_finite(self.extra)
        if where is not None:  # JSON has no NaN or Infinity: `--json` output and the store stay JSON
            raise ParseError(f"extra field {where} is not a finite number (NaN or Infinity)")

    @property
    def multi_node(self) -> bool | None:
        """True when the ranks ran on more than one host; None when the log does not say."""
        return len(self.hosts) > 1 if self.hosts else None

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["hosts"] = list(self.hosts)
        data["sizes"] = [asdict(row) for row in self.sizes]
        data["problems"] = list(self.problems)
        data["multi_node"] = self.multi_node
        return data
