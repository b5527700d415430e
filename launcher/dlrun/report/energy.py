"""What the telemetry of the reported runs says, for the report: energy columns per point and per run, and
per point one trace of power and utilisation over time per device (from its newest run whose series is on
this machine) for the telemetry figures.

Everything here comes from stored summaries and from series files written on compute nodes: data, read
within dlrun.telemetry.series' size budget and cut to MAX_TRACE_POINTS per device. A figure shows what could
be read; energy that could not be read is said so ("not readable here"), never drawn or summed as zero.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlrun.results.store import Store
from dlrun.telemetry.series import Series, read_run
from dlrun.telemetry.summary import timed_window

#: Runs whose telemetry the report reads (the newest listed runs and the points' runs, up to this many).
MAX_RUNS = 2000
#: Telemetry figures drawn (one per point, the first points in table order); the tables hold them all.
MAX_TRACES = 12
#: Points per device and quantity in a figure (evenly spaced samples beyond it).
MAX_TRACE_POINTS = 600
#: What stands in an energy cell where a run has telemetry but no energy reading.
UNREADABLE = "not readable here"


@dataclass
class Trace:
    """Power and utilisation of each device of one run over time, seconds from its first sample."""

    anchor: str                      # the point's table row
    label: str                       # what the point is
    run_id: str
    window: tuple[float, float] | None        # the timed window, in the same seconds
    power: dict[str, list[tuple[float, float]]] = field(default_factory=dict)   # device -> (s, W)
    util: dict[str, list[tuple[float, float]]] = field(default_factory=dict)    # device -> (s, %)
    notes: list[str] = field(default_factory=list)


def _num(value: Any, low: float = 0.0, high: float = math.inf) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if low <= value <= high else None


def _thin(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(points) <= MAX_TRACE_POINTS:
        return points
    step = (len(points) - 1) / (MAX_TRACE_POINTS - 1)
    return [points[round(i * step)] for i in range(MAX_TRACE_POINTS)]


def _rapl_power(series: Series, t0: float) -> list[tuple[float, float]]:
    """CPU package power (W, all zones) from RAPL counter growth between samples; none where unreadable."""
    rapl = series.header.get("rapl") if isinstance(series.header.get("rapl"), dict) else {}
    zones = rapl.get("zones") if isinstance(rapl.get("zones"), dict) else {}
    if not rapl.get("readable") or not zones:
        return []
    out = []
    for before, after in zip(series.samples, series.samples[1:]):
        seconds, joules = after["t"] - before["t"], 0.0
        for zone, info in zones.items():
            a, b = (_num((s.get("rapl_uj") or {}).get(zone)) for s in (before, after))
            if a is None or b is None or seconds <= 0:
                joules = math.nan
                break
            wrap = _num((info or {}).get("max_uj"), 1.0) or 0.0
            joules += ((b - a) if b >= a else (b + wrap - a)) / 1e6
        if math.isfinite(joules):
            out.append((after["t"] - t0, joules / seconds))
    return out


def _cpu_util(series: Series, t0: float) -> list[tuple[float, float]]:
    """The mean utilisation over the node's cores at each sample (samples with no core reading left out)."""
    out = []
    for sample in series.samples:
        cores = [v for v in (_num(v, 0, 100) for v in sample.get("cpu") or []) if v is not None]
        if cores:
            out.append((sample["t"] - t0, sum(cores) / len(cores)))
    return out


def _gpu_lines(series: Series, t0: float, into: Trace) -> None:
    """Each GPU's power and utilisation readings (a missing or impossible reading is left out)."""
    for sample in series.samples:
        for gpu in sample.get("gpu") or []:
            index = gpu.get("i") if isinstance(gpu, dict) else None
            if not isinstance(index, int) or isinstance(index, bool):
                continue
            name = f"{series.node} GPU {index}"
            for key, lines, high in (("power_w", into.power, 100_000.0), ("util", into.util, 100.0)):
                value = _num(gpu.get(key), 0, high)
                if value is not None:
                    lines.setdefault(name, []).append((sample["t"] - t0, value))


def trace(series: list[Series], result: dict[str, Any] | None, anchor: str, label: str, run_id: str) -> Trace | None:
    """One run's trace (None when no node left a sample)."""
    series = [s for s in series if s.samples]
    if not series:
        return None
    t0 = min(s.samples[0]["t"] for s in series)
    timed = timed_window(result)
    out = Trace(anchor, label, run_id, (timed[0] - t0, timed[1] - t0) if timed else None)
    for s in series:
        cpu = _cpu_util(s, t0)
        if cpu:
            out.util[f"{s.node} CPU"] = cpu
        rapl = _rapl_power(s, t0)
        if rapl:
            out.power[f"{s.node} CPU (RAPL)"] = rapl
        else:
            out.notes.append(f"{s.node}: CPU power {UNREADABLE}")
        _gpu_lines(s, t0, out)
    out.power = {k: _thin(v) for k, v in out.power.items()}
    out.util = {k: _thin(v) for k, v in out.util.items()}
    return out


def energy_cells(summary: Any) -> dict[str, str]:
    """A run's energy columns as text: energy J, energy per sample with its unit, samples/J, mean power W;
    UNREADABLE where it has telemetry but no energy reading, '-' where it has no telemetry."""
    if not isinstance(summary, dict) or "window" not in summary:
        return dict.fromkeys(COLUMNS, "-")
    per_sample = summary.get("energy_per_sample") or {}
    joules = _num(summary.get("energy_j"))
    if joules is None:
        return dict.fromkeys(COLUMNS, UNREADABLE)
    value, unit = _num(per_sample.get("value")), str(per_sample.get("unit") or "")
    spj = _num(per_sample.get("samples_per_joule"))
    power = _num(summary.get("mean_power_w"))
    return {"energy (J)": f"{joules:,.1f} ({', '.join(map(str, summary.get('energy_covers') or []))})",
            "energy per sample": f"{value:.4g} {unit}" if value is not None else "-",
            "samples/J": f"{spj:.4g} {unit[2:]}s/J" if spj is not None else "-",
            "mean power (W)": f"{power:,.1f}" if power is not None else "-"}


COLUMNS = ("energy (J)", "energy per sample", "samples/J", "mean power (W)")


def _mean_summary(readable: list[dict[str, Any]]) -> dict[str, Any]:
    """A summary-shaped record of the arithmetic means of runs that all have an energy reading."""
    mean: dict[str, Any] = {"energy_j": sum(s["energy_j"] for s in readable) / len(readable), "window": {},
                            "energy_covers": sorted({c for s in readable for c in s.get("energy_covers") or []})}
    per = [v for v in ((s.get("energy_per_sample") or {}) for s in readable) if _num(v.get("value")) is not None]
    if per:
        spj = [v for v in (_num(v.get("samples_per_joule")) for v in per) if v is not None]
        mean["energy_per_sample"] = {"value": sum(v["value"] for v in per) / len(per), "unit": per[0].get("unit"),
                                     "samples_per_joule": sum(spj) / len(spj) if len(spj) == len(per) else None}
    powers = [p for p in (_num(s.get("mean_power_w")) for s in readable) if p is not None]
    mean["mean_power_w"] = sum(powers) / len(powers) if len(powers) == len(readable) else None
    return mean


def point_cells(summaries: list[Any]) -> dict[str, str]:
    """A point's energy columns: the mean over its runs with an energy reading (and how many of its runs
    had one), UNREADABLE where none had one, '-' where none had telemetry."""
    readable = [s for s in summaries if isinstance(s, dict) and _num(s.get("energy_j")) is not None]
    if not readable:
        with_telemetry = any(isinstance(s, dict) and "window" in s for s in summaries)
        return dict.fromkeys(COLUMNS, UNREADABLE if with_telemetry else "-")
    cells = energy_cells(_mean_summary(readable))
    cells["energy (J)"] += f", mean of {len(readable)} of {len(summaries)} run(s)"
    return cells


@dataclass
class Telemetry:
    """The report's telemetry: energy cells per point anchor and per run id, and the traces to draw."""

    points: dict[str, dict[str, str]] = field(default_factory=dict)
    runs: dict[str, dict[str, str]] = field(default_factory=dict)
    traces: list[Trace] = field(default_factory=list)

    @property
    def any(self) -> bool:
        return any(v != "-" for cells in [*self.points.values(), *self.runs.values()] for v in cells.values())


def _summaries(store: Store, run_ids: list[str]) -> dict[str, tuple[Any, str | None, str]]:
    """run id -> (its telemetry summary, run directory, created_at): one indexed query per 500 ids, reading
    the summary alone out of each provenance (a report of 100,000 runs reads no whole records here)."""
    out: dict[str, tuple[Any, str | None, str]] = {}
    with store.reading() as conn:
        for at in range(0, len(run_ids), 500):
            chunk = run_ids[at:at + 500]
            rows = conn.execute("SELECT id, json_extract(provenance, '$.telemetry'), run_dir, created_at FROM runs "
                                f"WHERE id IN ({', '.join('?' * len(chunk))})", chunk).fetchall()
            for run_id, summary, run_dir, created in rows:
                try:
                    out[run_id] = (json.loads(summary) if summary else None, run_dir, created or "")
                except ValueError:
                    out[run_id] = (None, run_dir, created or "")
    return out


def _primary(store: Store, run_id: str) -> dict[str, Any] | None:
    results = store.get_run(run_id).get("results") or []
    return next((r for r in results if r.get("metric") in ("throughput", "busbw")), None)


def _newest_trace(store: Store, point: Any, runs: dict[str, tuple[Any, str | None, str]]) -> Trace | None:
    """The trace of the point's newest run whose series is on this machine."""
    mine = [i for i in point.run_ids if i in runs and runs[i][1]]
    for run_id in sorted(mine, key=lambda i: runs[i][2], reverse=True):
        series = [s for s in read_run(Path(str(runs[run_id][1]))) if s.samples]
        if series:
            return trace(series, _primary(store, run_id), point.anchor, point.provenance().split(":")[0], run_id)
    return None


def gather_telemetry(store: Store, points: list[Any], runs_listed: list[dict[str, Any]]) -> Telemetry:
    """The telemetry of the points (objects with `anchor`, `run_ids` and `provenance()`) and listed runs."""
    listed = [run["id"] for run in runs_listed]
    wanted = list(dict.fromkeys([*listed, *(r for p in points for r in p.run_ids)]))[:MAX_RUNS]
    runs = _summaries(store, wanted)
    out = Telemetry(runs={i: energy_cells(runs.get(i, (None,))[0]) for i in listed})
    for point in points:
        out.points[point.anchor] = point_cells([runs[i][0] for i in point.run_ids if i in runs])
        if len(out.traces) < MAX_TRACES:
            found = _newest_trace(store, point, runs)
            if found is not None:
                out.traces.append(found)
    return out
