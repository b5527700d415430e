"""Reading the samplers' series (`telemetry/<node>.jsonl` in a run directory) and integrating them.

The files come from compute nodes: they are data, read within a size budget (a file or line beyond it is
cut, a line that is not a JSON object is counted and skipped), and nothing in them is trusted to be well
formed. A node's series is its header (what could be read there and why not), its samples in time order, and
how it ended.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DIR = "telemetry"  # in the run directory
MAX_FILES = 1024
MAX_FILE_BYTES = 64 << 20
MAX_LINE_BYTES = 1 << 20


@dataclass
class Series:
    node: str
    header: dict[str, Any]
    samples: list[dict[str, Any]]
    end: dict[str, Any] | None
    skipped_lines: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def period_s(self) -> float | None:
        period = self.header.get("period_s")
        return float(period) if _number(period) and period > 0 else None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_series(path: Path) -> Series | None:
    """One node's series; None when the file holds no header (not a sampler's file)."""
    header: dict[str, Any] | None = None
    samples: list[dict[str, Any]] = []
    end = None
    skipped = 0
    notes = []
    with open(path, "rb") as handle:
        data = handle.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        notes.append(f"{path.name} is larger than {MAX_FILE_BYTES >> 20} MiB; read up to there")
        data = data[:MAX_FILE_BYTES]
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw[:MAX_LINE_BYTES])
        except ValueError:
            skipped += 1
            continue
        if not isinstance(record, dict):
            skipped += 1
        elif "dlrun_telemetry" in record and header is None:
            header = record
        elif "end" in record:
            end = record
        elif _number(record.get("t")):
            samples.append(record)
        else:
            skipped += 1
    if header is None:
        return None
    samples.sort(key=lambda s: s["t"])
    node = str(header.get("node") or path.stem)[:200]
    return Series(node=node, header=header, samples=samples, end=end, skipped_lines=skipped, notes=notes)


def read_run(run_path: Path) -> list[Series]:
    """Every node's series of a run, by node name."""
    folder = Path(run_path) / DIR
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.jsonl"))[:MAX_FILES]:
        if path.is_file():
            series = read_series(path)
            if series is not None:
                found.append(series)
    return found


# --- integration ------------------------------------------------------------------------------------------

def counter_delta(points: list[tuple[float, float]], start: float, end: float, wrap: float | None) -> float | None:
    """The growth of a cumulative counter between `start` and `end`, read as (time, value) points, linear
    between points; a value that falls is a wrap of `wrap` (RAPL) or, without one, a counter reset. None
    when the points do not span the window."""
    points = [(t, v) for t, v in points if _number(t) and _number(v)]
    if len(points) < 2 or points[0][0] > start or points[-1][0] < end:
        return None
    unwrapped = [points[0]]
    offset = 0.0
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if v1 < v0:
            if wrap is None:
                return None
            offset += wrap
        unwrapped.append((t1, v1 + offset))
    return _at(unwrapped, end) - _at(unwrapped, start)


def _at(points: list[tuple[float, float]], when: float) -> float:
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if t0 <= when <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (when - t0) / (t1 - t0)
    return points[-1][1] if when >= points[-1][0] else points[0][1]


def power_integral(points: list[tuple[float, float]], start: float, end: float) -> float | None:
    """Joules from power readings (W) between `start` and `end`: trapezoids between points, the window's
    edges interpolated. None when the points do not span the window."""
    points = [(t, v) for t, v in points if _number(t) and _number(v)]
    if len(points) < 2 or points[0][0] > start or points[-1][0] < end:
        return None
    inside = [(start, _at(points, start))] + [p for p in points if start < p[0] < end] + [(end, _at(points, end))]
    return sum((t1 - t0) * (v0 + v1) / 2 for (t0, v0), (t1, v1) in zip(inside, inside[1:]))


def window_samples(series: Series, start: float, end: float) -> list[dict[str, Any]]:
    """The samples taken inside (start, end]: a sample covers the period before it. A window shorter than a
    period gets the first sample after it."""
    inside = [s for s in series.samples if start < s["t"] <= end]
    return inside or [s for s in series.samples if s["t"] > end][:1]
