"""dllogger's two line forms, read into one kind of event (the parser in dllogger.py decides what they mean).

dllogger (github.com/NVIDIA/dllogger) writes each `log(step, data)` call through its backends:

  JSONStreamBackend  `DLLL {"timestamp": "<unix seconds>", "datetime": ..., "type": "LOG", "step": STEP,
                     "data": {...}}`, plus `"type": "METADATA"` lines giving a metric's unit;
  StdOutBackend      `DLL 2020-12-16 11:37:27.155029 - STEP key : value unit  key : value ...` (the prefix is
                     the application's; DeepLearningExamples uses `DLL `, dllogger's own example `DLLL `).

STEP is `"PARAMETER"` for the run's arguments, `[]` (stdout: `Summary:`, `()` or nothing) for the summary,
`[epoch]` or `[epoch, iteration]` (stdout: `Epoch: 0 Iteration: 12`, `(0, 120)`, or `Iteration: 16` where
an application counts iterations only), and longer tuples for validation iterations.

Stdout lines are split on ` : `, which dllogger puts between a metric's name and its value; what lies
between two of them is the value (and its unit) and the next name, separated by the two spaces dllogger
leaves after a value without a unit, else by the last space. Only `str.split` and anchored patterns without
nested repetition are used, so a line costs time linear in its length.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dlrun.results.parsers.common import NUMBER, read_json, tagged_lines
from dlrun.results.parsers.result import ParseError

JSON_PREFIX = "DLLL "
#: Prefixes of the stdout backend's lines, then the timestamp and ` - `.
STDOUT = re.compile(r"DLLL? (\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{1,6})?)(?:[+-]\d{2}:?\d{2})? - ")
STEP = re.compile(r"(?:(?P<parameter>PARAMETER)|(?P<summary>Summary:)"
                  r"|Epoch: (?P<epoch>\d{1,9})(?: Iteration: (?P<iteration>\d{1,12}))?"
                  r"(?P<validation> Validation Iteration: \d{1,12})?"
                  r"|Iteration: (?P<only_iteration>\d{1,12})"
                  r"|\((?P<tuple>[-\d, ]{0,60})\)|\[(?P<list>[-\d, ]{0,60})\])(?= |$)")
NUMBER_TEXT = re.compile(NUMBER)
MAX_UNIT = 20


@dataclass
class Event:
    """One dllogger line: its kind, its step numbers, its time (seconds) and its data."""

    kind: str  # parameter | summary | epoch | iteration | metadata | other
    epoch: int | None = None
    iteration: int | None = None
    time: float | None = None
    data: dict[str, Any] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)  # as the line spells them (`img/s`)
    rank: int | None = None


def read_events(text: str) -> Iterator[Event]:
    """Every dllogger line of `text` as an Event; lines cut or garbled by other output are left out."""
    for rank, raw in tagged_lines(text):
        line = raw.lstrip()
        if line.startswith(JSON_PREFIX + "{"):
            event = _json_event(line[len(JSON_PREFIX):])
        elif line.startswith("DLL"):
            event = _stdout_event(line)
        else:
            continue
        if event is not None:
            event.rank = rank
            yield event


def _json_event(payload: str) -> Event | None:
    try:
        record = read_json(payload, "DLLL line")
    except ParseError:  # a line cut by another process's output is no event
        return None
    if not isinstance(record, dict):
        return None
    time = _seconds(record.get("timestamp"))
    if record.get("type") == "METADATA":
        metadata = record.get("metadata")
        unit = metadata.get("unit") if isinstance(metadata, dict) else None
        metric = record.get("metric")
        if isinstance(metric, str) and isinstance(unit, str):
            return Event("metadata", time=time, units={metric: unit})
        return None
    data = record.get("data")
    if record.get("type") != "LOG" or not isinstance(data, dict):
        return None
    kind, epoch, iteration = _json_step(record.get("step"))
    return Event(kind, epoch, iteration, time, dict(data))


def _json_step(step: Any) -> tuple[str, int | None, int | None]:
    if step == "PARAMETER":
        return "parameter", None, None
    if isinstance(step, bool):
        return "other", None, None
    if isinstance(step, int):
        return "iteration", None, step
    if isinstance(step, (list, tuple)):
        if not step:
            return "summary", None, None
        if all(isinstance(n, int) and not isinstance(n, bool) for n in step):
            if len(step) == 1:
                return "epoch", step[0], None
            if len(step) == 2:
                return "iteration", step[0], step[1]
    return "other", None, None


def _seconds(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and len(value) <= 40 and NUMBER_TEXT.fullmatch(value):
        return float(value)
    return None


def _stdout_event(line: str) -> Event | None:
    match = STDOUT.match(line)
    if not match:
        return None
    try:
        time = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S.%f" if "." in match.group(1)
                                 else "%Y-%m-%d %H:%M:%S").timestamp()
    except ValueError:  # a date that does not exist (month 13)
        return None
    rest = line[match.end():]
    kind, epoch, iteration, body = _stdout_step(rest)
    event = Event(kind, epoch, iteration, time)
    for key, value in _metrics(body):
        number, unit = _value(value)
        event.data[key] = value if number is None else number
        if unit:
            event.units[key] = unit
    return event


def _stdout_step(rest: str) -> tuple[str, int | None, int | None, str]:
    """(kind, epoch, iteration, the metrics after the step) of a stdout line after its ` - `."""
    if rest.startswith(" "):  # an empty step: TensorFlow's summary, logged with step ()
        return "summary", None, None, rest
    match = STEP.match(rest)
    if not match:
        return "other", None, None, rest
    body = rest[match.end():]
    if match.group("parameter"):
        return "parameter", None, None, body
    if match.group("summary"):
        return "summary", None, None, body
    if match.group("epoch") is not None:
        if match.group("validation"):
            return "other", None, None, body
        epoch = int(match.group("epoch"))
        iteration = match.group("iteration")
        return ("iteration", epoch, int(iteration), body) if iteration else ("epoch", epoch, None, body)
    if match.group("only_iteration") is not None:
        return "iteration", None, int(match.group("only_iteration")), body
    numbers = [part.strip() for part in (match.group("tuple") or match.group("list") or "").split(",")]
    numbers = [part for part in numbers if part]
    if not numbers:
        return "summary", None, None, body
    if not all(re.fullmatch(r"-?\d{1,12}", part) for part in numbers) or len(numbers) > 2:
        return "other", None, None, body
    if len(numbers) == 1:
        return "epoch", int(numbers[0]), None, body
    return "iteration", int(numbers[0]), int(numbers[1]), body


def _metrics(body: str) -> list[tuple[str, str]]:
    """`key : value unit  key : value` -> [(key, "value unit"), ...]."""
    parts = body.split(" : ")
    if len(parts) < 2:
        return []
    found = []
    key: str | None = parts[0].strip()
    for index, part in enumerate(parts[1:], start=1):
        text = part.strip()
        if index == len(parts) - 1:
            value, following = text, None
        elif "  " in text:
            value, following = text.rsplit("  ", 1)
        else:
            pieces = text.rsplit(" ", 1)
            value, following = ("", pieces[0]) if len(pieces) == 1 else (pieces[0], pieces[1])
        if key:
            found.append((key, value.strip()))
        key = following.strip() if following else None
    return found


def _value(text: str) -> tuple[float | None, str | None]:
    """(number, unit) of a stdout value such as `10393.54 img/s`; (None, None) for text that is no number."""
    number, _, unit = text.partition(" ")
    if len(number) > 40 or not NUMBER_TEXT.fullmatch(number):
        return None, None
    unit = unit.strip()
    return float(number), unit if 0 < len(unit) <= MAX_UNIT and " " not in unit else None
