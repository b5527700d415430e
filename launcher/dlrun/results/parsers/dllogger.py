"""NVIDIA DeepLearningExamples logs written through dllogger: `DLLL {json}` lines or the stdout backend's
`DLL <time> - <step> key : value` lines (both forms are read by dllogger_lines.py).

Which figure: the training throughput that includes data loading (`train.total_ips`, TensorFlow's
`total_ips`/`train_throughput`, BERT's sequences per second), never the compute-only `train.compute_ips`
when the log prints both (it leaves out the time spent waiting for data, so it overstates); from the summary
line when there is one, else the last epoch line, else the mean over the iteration lines after warm-up
(the first half of them). Only a log that prints no end-to-end figure at all is read for a compute-only one,
and its `value_is` says so.

The `PARAMETER` line gives the model (`arch`), the batch per GPU, the world size, the precision (`amp`,
`fp16`, `use_tf_amp`, `precision`, `dtype`) and the input (`data_backend`/`data` of the PyTorch models,
`data_dir` of the TensorFlow ones). Where the iteration lines carry times, the batch and the world size are
known, the rate the line times allow (images per iteration x iterations / seconds between the lines) is
kept, and a printed rate more than 25 % above it is flagged: DeepLearningExamples' PyTorch ConvNets of 2020
stop the iteration's clock before the GPU has finished (no synchronisation before `time.time()`), and
published logs show `train.total_ips` at twice what their own line times allow.
"""
from __future__ import annotations

from statistics import fmean
from typing import Any

from dlrun.results.parsers.dllogger_lines import Event, read_events
from dlrun.results.parsers.result import ParsedResult, ParseError, check_count, check_rate

NAME = "dllogger"
DESCRIPTION = ("NVIDIA DeepLearningExamples dllogger: `DLLL {json}` lines or the stdout backend's "
               "`DLL <time> - <step> key : value` lines")
#: Training throughputs that include data loading, most preferred first, with the unit each counts when the
#: log does not say (METADATA lines and stdout units override it).
END_TO_END = {
    "train.total_ips": "images/sec", "total_ips": "images/sec", "train_throughput": "images/sec",
    "throughput_train": "sequences/sec", "training_sequences_per_second": "sequences/sec",
    "train.throughput": "samples/sec", "throughput": "samples/sec", "train_items_per_sec": "samples/sec",
    "tokens_per_sec": "tokens/sec",
}
#: Throughputs that leave out data loading: used only where a log prints no end-to-end figure.
COMPUTE_ONLY = {"train.compute_ips": "images/sec", "compute_ips": "images/sec"}
UNIT_SPELLINGS = {"img/s": "images/sec", "images/s": "images/sec", "images/sec": "images/sec",
                  "sequences/s": "sequences/sec", "sequences/sec": "sequences/sec", "seq/s": "sequences/sec",
                  "samples/s": "samples/sec", "samples/sec": "samples/sec", "tokens/s": "tokens/sec"}
TIERS = ("summary", "epoch", "iteration")
#: How far a printed rate may lie above the rate the line times allow before it is flagged.
WALL_CLOCK_TOLERANCE = 1.25
AMP_FLAGS = ("amp", "fp16", "use_tf_amp", "use_amp", "amp_run")


def parse(text: str) -> list[ParsedResult]:
    events = _lowest_rank(list(read_events(text)))
    if not events:
        return []
    units: dict[str, str] = {}
    params: dict[str, Any] = {}
    for event in events:
        units.update(event.units)
        if event.kind == "parameter":
            for key, value in event.data.items():
                params.setdefault(key, value)
    chosen = _choose(events)
    if chosen is None:
        raise ParseError(f"dllogger log ({len(events)} dllogger lines) has no training throughput; looked for "
                         + ", ".join([*END_TO_END, *COMPUTE_ONLY]))
    tier, key, points = chosen
    unit = _unit(key, units)
    batch, world = _count(params, ("batch_size", "batch size", "train_batch_size")), _count(params, ("world_size",))
    value, value_is, extra = _figure(tier, key, points, events)
    precision, amp_dtype = _precision(params)
    extra.update({"key": key, "dllogger_lines": len(events), "arch": _text(params.get("arch")),
                  "precision": precision, "amp_dtype": amp_dtype, "world_size": world,
                  "data_source": _data_source(params) if unit == "images/sec" else None,
                  "data_backend": _text(params.get("data_backend"))})
    problems = []
    if tier == "iteration" and unit == "images/sec" and batch and world and not _accumulates(params):
        wall = _wall_clock(points, batch * world)
        extra["wall_clock_rate"] = wall
        if wall is not None and value > WALL_CLOCK_TOLERANCE * wall:
            problems.append(f"{key} averages {value:,.1f} {unit} over the iterations used, {value / wall:.1f}x the "
                            f"{wall:,.1f} {unit} their line times allow ({batch} x {world} images per iteration); "
                            "the printed rate cannot be right")
    return [ParsedResult(kind=NAME, metric="throughput", value=value, unit=unit, model=extra["arch"],
                         batch_size=batch, num_devices=world, num_ranks=world, gpus_per_rank=1 if world else None,
                         problems=tuple(problems), extra=extra, value_is=value_is)]


def _lowest_rank(events: list[Event]) -> list[Event]:
    """The events of the lowest launcher-tagged rank (and untagged ones): every rank may log the same steps."""
    ranks = {event.rank for event in events if event.rank is not None}
    return [event for event in events if event.rank is None or event.rank == min(ranks)] if ranks else events


def _choose(events: list[Event]) -> tuple[str, str, list[tuple[float | Any, Event]]] | None:
    """(tier, key, [(value, event), ...]): end-to-end before compute-only, summary before epoch lines before
    iteration lines, then the keys in the order of preference."""
    for keys in (END_TO_END, COMPUTE_ONLY):
        for tier in TIERS:
            for key in keys:
                points = [(event.data[key], event) for event in events if event.kind == tier and key in event.data]
                if points:
                    return tier, key, points
    return None


def _figure(tier: str, key: str, points: list[tuple[Any, Event]],
            events: list[Event]) -> tuple[float, str, dict[str, Any]]:
    """(value, value_is, extra) of the chosen figure."""
    compute_only = key in COMPUTE_ONLY
    caveat = ("; compute only, without data loading (the log prints no end-to-end rate), so it overstates the "
              "end-to-end rate" if compute_only else "")
    other = next((event.data[name] for event in events if event.kind == tier
                  for name in COMPUTE_ONLY if name in event.data), None) if not compute_only else None
    extra: dict[str, Any] = {"tier": tier, "compute_only_rate": _rate_or_none(other)}
    if tier == "summary":
        return check_rate(key, points[-1][0]), f"{key} of the summary line{caveat}", extra
    if tier == "epoch":
        epoch = points[-1][1].epoch
        return (check_rate(key, points[-1][0]),
                f"{key} of the last epoch line (epoch {epoch}; no summary line){caveat}", extra)
    rates = [check_rate(key, value) for value, _ in points]
    warm = len(rates) // 2
    extra.update({"iterations_logged": len(rates), "iterations_warmup": warm, "iterations_used": len(rates) - warm})
    return (fmean(rates[warm:]),
            f"mean of {key} over the last {len(rates) - warm} of {len(rates)} iteration lines (the first {warm} "
            f"count as warm-up; no summary or epoch line){caveat}", extra)


def _rate_or_none(value: Any) -> float | None:
    try:
        return check_rate("compute-only rate", value) if value is not None else None
    except ParseError:
        return None


def _wall_clock(points: list[tuple[Any, Event]], images_per_iteration: int) -> float | None:
    """Images per second between the last warm-up line and the last line, from the lines' times; None where
    the lines do not tell (no times, an epoch boundary, iteration numbers that do not increase)."""
    warm = len(points) // 2
    if warm == 0:
        return None
    before, last = points[warm - 1][1], points[-1][1]
    window = [event for _, event in points[warm - 1:]]
    if before.time is None or last.time is None or any(event.epoch != before.epoch for event in window):
        return None
    if before.iteration is None or last.iteration is None:
        return None
    steps, seconds = last.iteration - before.iteration, last.time - before.time
    if steps <= 0 or seconds <= 0:
        return None
    return images_per_iteration * steps / seconds


def _unit(key: str, units: dict[str, str]) -> str:
    stated = units.get(key)
    if stated is None or stated == "":
        return (END_TO_END | COMPUTE_ONLY)[key]
    if stated not in UNIT_SPELLINGS:
        raise ParseError(f"dllogger: {key} is in {stated[:20]!r}, which is none of the units dlrun compares ("
                         + ", ".join(UNIT_SPELLINGS) + ")")
    return UNIT_SPELLINGS[stated]


def _count(params: dict[str, Any], names: tuple[str, ...]) -> int | None:
    for name in names:
        value = params.get(name)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return check_count(name, value)
    return None


def _flag(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= 200 and value != "None" else None


def _precision(params: dict[str, Any]) -> tuple[str | None, str | None]:
    """(fp32 | amp | tf32 | None, float16 | None) from the PARAMETER line."""
    flags = [_flag(params.get(name)) for name in AMP_FLAGS]
    text = str(params.get("precision") or params.get("dtype") or "").lower()
    half = _flag(params.get("fp16")) is True or text in ("fp16", "float16")
    if any(flag is True for flag in flags) or text in ("amp", "fp16", "float16", "mixed"):
        return "amp", "float16" if half else None
    if text in ("fp32", "float32", "tf32"):
        return text.replace("float32", "fp32"), None
    return ("fp32", None) if any(flag is False for flag in flags) else (None, None)


def _data_source(params: dict[str, Any]) -> str | None:
    """synthetic, jpeg (the PyTorch models' ImageNet folders) or tfrecord (the TensorFlow models'), or None."""
    backend = str(params.get("data_backend") or "").lower()
    if backend in ("syntetic", "synthetic"):  # DeepLearningExamples spells it "syntetic"
        return "synthetic"
    if backend in ("pytorch", "dali-cpu", "dali-gpu") and _text(params.get("data")):
        return "jpeg"
    if "data_dir" in params:
        return "tfrecord" if _text(params.get("data_dir")) else "synthetic"
    return None


def _accumulates(params: dict[str, Any]) -> bool:
    """Whether an iteration may hold several batches (gradient accumulation): then no wall-clock check."""
    return any("accumulat" in name and isinstance(value, (int, float)) and not isinstance(value, bool) and value > 1
               for name, value in params.items())
