"""A run's telemetry in one record: utilisation, power, energy, energy per sample, throttling.

The window is the harness's timed window (`timed_start_unix` + `wall_time_s` in its result) when the
result has one and the series span it, else the whole job. Energy comes from counters where the node has
them (RAPL's energy_uj, NVML's total energy), else from power readings integrated over the window; a source
that cannot be read is named with the reason and left out of the sums, never counted as zero. Energy per
sample divides the window's energy by the samples the result says it processed in that window (images,
sequences or tokens per second x the timed seconds), so it exists only for a timed window.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from dlrun.telemetry.series import Series, counter_delta, power_integral, read_run, window_samples

FORMAT = 1
#: The result's unit -> what one sample is.
SAMPLE_UNITS = {"images/sec": "image", "sequences/sec": "sequence", "tokens/sec": "token", "samples/sec": "sample"}
#: NVML / nvidia-smi clock event reasons that slow a GPU down (idle, application clocks and the display
#: clock are not slowdowns).
THROTTLE_REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
                    0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown"}
#: The reasons that are the GPU's own power or thermal limits (sync boost waits on other GPUs: not one).
POWER_THERMAL = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
MAX_POWER_W = 100_000.0  # one node; anything above is a misread, not a measurement


def _num(value: Any, low: float = 0.0, high: float = math.inf) -> float | None:
    """A finite number within [low, high], else None: what a node reported is data, not a fact."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if low <= value <= high else None


def _mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _field(result: dict[str, Any], name: str) -> Any:
    """A field of a result: the parsed result's own, else the harness record it keeps in `extra`."""
    extra = result.get("extra") if isinstance(result.get("extra"), dict) else {}
    return result[name] if result.get(name) is not None else extra.get(name)


def timed_window(result: dict[str, Any] | None) -> tuple[float, float] | None:
    if not result:
        return None
    start, wall = _num(_field(result, "timed_start_unix"), 1.0), _num(_field(result, "wall_time_s"))
    return (start, start + wall) if start is not None and wall else None


def processed_samples(result: dict[str, Any] | None) -> tuple[float, str] | None:
    """(samples processed in the timed window, what a sample is) from a training result."""
    if not result or result.get("metric") != "throughput":
        return None
    unit = SAMPLE_UNITS.get(str(result.get("unit")))
    rate, wall = _num(result.get("value")), _num(_field(result, "wall_time_s"))
    return (rate * wall, unit) if unit and rate and wall else None


# --- per node -----------------------------------------------------------------------------------------------

def _cpu(series: Series, samples: list[dict[str, Any]]) -> dict[str, Any]:
    util = [_mean([_num(v, 0, 100) for v in s.get("cpu") or [] if v is not None]) for s in samples]
    load = [_num((s.get("load") or [None])[0]) for s in samples]
    mem = [_num(s.get("mem_mib")) for s in samples]
    mhz = [_num((s.get("mhz") or [None, None])[1], 0, 100_000) for s in samples]
    return {"mean_util_pct": _mean(util), "max_util_pct": max((u for u in util if u is not None), default=None),
            "mean_load1": _mean(load), "max_mem_used_mib": max((m for m in mem if m is not None), default=None),
            "mean_mhz": _mean(mhz)}


def _rapl(series: Series, start: float, end: float) -> dict[str, Any]:
    rapl = series.header.get("rapl") if isinstance(series.header.get("rapl"), dict) else {}
    zones = rapl.get("zones") if isinstance(rapl.get("zones"), dict) else {}
    if not rapl.get("readable") or not zones:
        return {"readable": False, "why": str(rapl.get("why") or "the sampler recorded no RAPL zones")[:300]}
    joules = 0.0
    for zone, info in zones.items():
        points = [(s["t"], (s.get("rapl_uj") or {}).get(zone)) for s in series.samples]
        wrap = _num((info or {}).get("max_uj"), 1.0)
        delta = counter_delta(points, start, end, wrap)
        if delta is None:
            return {"readable": True, "joules": None, "why": "the samples do not span the window"}
        joules += delta / 1e6
    return {"readable": True, "joules": joules, "zones": sorted(str((i or {}).get("name")) for i in zones.values())}


def _max(values: list[float | None]) -> float | None:
    return max((v for v in values if v is not None), default=None)


def _device_energy(rows: list[tuple[float, dict[str, Any]]], start: float, end: float) -> tuple[float | None, str | None]:
    """(joules, from what) of one GPU over the window: its energy counter, else its power readings."""
    energy = counter_delta([(t, _num(g.get("energy_mj"))) for t, g in rows], start, end, None)
    if energy is not None:
        return energy / 1000.0, "NVML energy counter"
    energy = power_integral([(t, _num(g.get("power_w"), 0, MAX_POWER_W)) for t, g in rows], start, end)
    return energy, "power readings integrated" if energy is not None else None


def _throttled(window: list[dict[str, Any]], period: float) -> dict[str, float]:
    """Seconds per slowdown reason: a sample whose mask has the reason's bit counts one period."""
    seconds: dict[str, float] = {}
    for g in window:
        mask = g.get("throttle")
        if not isinstance(mask, int) or isinstance(mask, bool):
            continue
        for bit, name in THROTTLE_REASONS.items():
            if mask & bit:
                seconds[name] = seconds.get(name, 0.0) + period
    return seconds


def _slowed(window: list[dict[str, Any]], period: float) -> float:
    """Seconds in which any power or thermal limit slowed the GPU (each sample counts one period)."""
    return sum(period for g in window if isinstance(g.get("throttle"), int) and not isinstance(g.get("throttle"), bool)
               and g["throttle"] & POWER_THERMAL)


def _gpu_device(series: Series, index: Any, start: float, end: float, inside: list[dict[str, Any]]):
    rows = [(s["t"], next((g for g in s.get("gpu") or [] if isinstance(g, dict) and g.get("i") == index), None))
            for s in series.samples]
    rows = [(t, g) for t, g in rows if g is not None]
    times = {s["t"] for s in inside}
    window = [g for t, g in rows if t in times]
    energy, source = _device_energy(rows, start, end)
    powers = [_num(g.get("power_w"), 0, MAX_POWER_W) for g in window]
    return {"i": index, "mean_util_pct": _mean([_num(g.get("util"), 0, 100) for g in window]),
            "mean_power_w": _mean(powers), "max_power_w": _max(powers), "energy_j": energy, "energy_from": source,
            "max_temp_c": _max([_num(g.get("temp_c"), -50, 200) for g in window]),
            "mean_sm_mhz": _mean([_num(g.get("sm_mhz"), 0, 100_000) for g in window]),
            "max_pcie_gen": _max([_num(g.get("pcie_gen"), 1, 16) for g in window]),
            "throttled_s": _throttled(window, series.period_s or 0.0),
            "slowed_s": _slowed(window, series.period_s or 0.0), "name": f"{series.node} GPU {index}"}


def node_summary(series: Series, start: float, end: float) -> dict[str, Any]:
    inside = window_samples(series, start, end)
    header_gpu = series.header.get("gpu") if isinstance(series.header.get("gpu"), dict) else {}
    indices = sorted({g.get("i") for s in series.samples for g in s.get("gpu") or []
                      if isinstance(g, dict) and isinstance(g.get("i"), int)})
    return {"node": series.node, "samples": len(inside), "cpu": _cpu(series, inside),
            "cpu_energy": _rapl(series, start, end), "gpu_source": str(header_gpu.get("source") or "none"),
            "gpu_why": header_gpu.get("why"), "gpus": [_gpu_device(series, i, start, end, inside) for i in indices]}


# --- the run --------------------------------------------------------------------------------------------------

def _window(series: list[Series], result: dict[str, Any] | None) -> tuple[float, float, str]:
    first = min(s.samples[0]["t"] for s in series if s.samples)
    last = max(s.samples[-1]["t"] for s in series if s.samples)
    timed = timed_window(result)
    if timed and first <= timed[0] and timed[1] <= last:
        return timed[0], timed[1], "timed window"
    return first, last, "whole job"


def _most_slowed(devices: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """The GPU that power or thermal limits slowed longest, and its share of the window."""
    device = max(devices, key=lambda d: d["slowed_s"])
    share = min(device["slowed_s"] / seconds, 1.0) if seconds > 0 else None
    return {"max_slowed_share": None if share is None else round(share, 4), "slowed_device": device["name"]}


def _gpu_totals(nodes: list[dict[str, Any]], source: str, seconds: float) -> dict[str, Any] | None:
    devices = [d for n in nodes for d in n["gpus"]]
    if not devices:
        return None
    throttled: dict[str, float] = {}
    for device in devices:
        for name, spent in device["throttled_s"].items():
            throttled[name] = throttled.get(name, 0.0) + spent
    energies = [d["energy_j"] for d in devices]
    return {"source": source, "devices": len(devices),
            "mean_util_pct": _round(_mean([d["mean_util_pct"] for d in devices]), 1),
            "mean_power_w": _round(sum(d["mean_power_w"] or 0.0 for d in devices)),
            "max_power_w": _round(max((d["max_power_w"] for d in devices if d["max_power_w"] is not None),
                                      default=None)),
            "energy_j": _round(sum(energies)) if None not in energies else None,
            "energy_from": sorted({d["energy_from"] for d in devices if d["energy_from"]}),
            "max_temp_c": max((d["max_temp_c"] for d in devices if d["max_temp_c"] is not None), default=None),
            "mean_sm_mhz": _round(_mean([d["mean_sm_mhz"] for d in devices]), 0),
            "throttled_s": {k: round(v, 1) for k, v in sorted(throttled.items())},
            "throttled_device_s": round(sum(throttled.values()), 1), **_most_slowed(devices, seconds)}


def _cpu_energy(nodes: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    unreadable = [f"{n['node']}: {n['cpu_energy'].get('why')}" for n in nodes if not n["cpu_energy"]["readable"]]
    if unreadable:
        return {"readable": False, "why": "not readable here (" + "; ".join(unreadable)[:400] + ")"}
    joules = [n["cpu_energy"].get("joules") for n in nodes]
    if None in joules:
        return {"readable": True, "joules": None, "why": "the samples do not span the window"}
    total = sum(joules)  # type: ignore[arg-type]
    return {"readable": True, "joules": round(total, 2), "mean_power_w": round(total / seconds, 2) if seconds else None,
            "zones": sorted({z for n in nodes for z in n["cpu_energy"].get("zones", [])})}


def _per_sample(energy: float | None, covers: list[str], window: str, result: dict[str, Any] | None,
                why: list[str]) -> dict[str, Any]:
    processed = processed_samples(result)
    if window != "timed window" or processed is None:
        return {"value": None, "why": "the result has no timed window with a sample count (only training results "
                                      "of dlrun's harness do)"}
    count, unit = processed
    if energy is None or not covers:
        return {"value": None, "unit": f"J/{unit}", "why": "; ".join(why) or "no energy readings in the window"}
    return {"value": round(energy / count, 6), "unit": f"J/{unit}", "samples": round(count, 3), "covers": covers,
            "samples_per_joule": round(count / energy, 6) if energy > 0 else None}


def _sampler_cpu_s(series: list[Series]) -> float | None:
    """The samplers' own CPU seconds, summed over the nodes (what telemetry cost the run)."""
    spent = [_num((s.end or {}).get("cpu_s")) for s in series]
    return round(sum(spent), 3) if spent and None not in spent else None  # type: ignore[arg-type]


def _energy(gpu: dict[str, Any] | None, cpu_energy: dict[str, Any]) -> tuple[float, list[str], list[str]]:
    """(joules of the sources that could be read, which they are, why the others could not)."""
    energy, covers, why = 0.0, [], []
    if gpu is not None and gpu["energy_j"] is not None:
        energy += gpu["energy_j"]
        covers.append("gpu")
    elif gpu is not None:
        why.append("a GPU's energy could not be read over the window")
    if cpu_energy.get("joules") is not None:
        energy += cpu_energy["joules"]
        covers.append("cpu (RAPL " + "+".join(cpu_energy["zones"]) + ")")
    else:
        why.append("CPU energy " + cpu_energy["why"])
    return energy, covers, why


def summarize(series: list[Series], result: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The run's telemetry summary; None when no node left a series with samples."""
    series = [s for s in series if s.samples]
    if not series:
        return None
    start, end, what = _window(series, result)
    seconds = max(end - start, 0.0)
    nodes = [node_summary(s, start, end) for s in series]
    sources = sorted({n["gpu_source"] for n in nodes})
    gpu = _gpu_totals(nodes, ", ".join(sources), seconds)
    cpu_energy = _cpu_energy(nodes, seconds)
    energy, covers, why = _energy(gpu, cpu_energy)
    cpu = {key: _round(_mean([n["cpu"][key] for n in nodes]), 1) for key in ("mean_util_pct", "mean_load1", "mean_mhz")}
    cpu["max_mem_used_mib"] = max((n["cpu"]["max_mem_used_mib"] for n in nodes
                                   if n["cpu"]["max_mem_used_mib"] is not None), default=None)
    return {
        "format": FORMAT, "nodes": len(series), "period_s": series[0].period_s,
        "samples": sum(len(s.samples) for s in series),
        "window": {"what": what, "start": round(start, 3), "end": round(end, 3), "seconds": round(seconds, 3)},
        "cpu": cpu, "cpu_energy": cpu_energy, "gpu": gpu,
        "energy_j": round(energy, 2) if covers else None, "energy_covers": covers,
        "mean_power_w": round(energy / seconds, 2) if covers and seconds else None,
        "energy_per_sample": _per_sample(energy if covers else None, covers, what, result, why),
        "per_node": [{"node": n["node"], "samples": n["samples"], "mean_cpu_util_pct": _round(n["cpu"]["mean_util_pct"], 1),
                      "cpu_energy_j": _round(n["cpu_energy"].get("joules")), "gpu_source": n["gpu_source"],
                      "gpus": len(n["gpus"])} for n in nodes],
        "skipped_lines": sum(s.skipped_lines for s in series),
        "sampler_cpu_s": _sampler_cpu_s(series),
        "ended": sorted({str((s.end or {}).get("reason", "no end line (the sampler was killed)"))[:80] for s in series}),
    }


def run_summary(run_path: Path, result: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The telemetry summary of a run directory (None: telemetry was off or no sampler wrote a sample)."""
    return summarize(read_run(run_path), result)


def result_fields(summary: dict[str, Any]) -> dict[str, Any]:
    """The few figures a result row carries (its `extra.telemetry`); the whole summary is in provenance."""
    per_sample = summary["energy_per_sample"]
    gpu = summary.get("gpu") or {}
    return {"energy_j": summary["energy_j"], "energy_covers": summary["energy_covers"],
            "energy_per_sample": per_sample.get("value"), "energy_per_sample_unit": per_sample.get("unit"),
            "samples_per_joule": per_sample.get("samples_per_joule"), "mean_power_w": summary["mean_power_w"],
            "gpu_mean_util_pct": gpu.get("mean_util_pct"), "gpu_throttled_device_s": gpu.get("throttled_device_s"),
            "cpu_mean_util_pct": summary["cpu"]["mean_util_pct"], "window": summary["window"]["what"],
            "window_s": summary["window"]["seconds"], "gpu_max_slowed_share": gpu.get("max_slowed_share"),
            "gpu_slowed_device": gpu.get("slowed_device")}
