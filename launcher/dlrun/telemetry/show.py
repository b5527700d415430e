"""A run's telemetry summary as the label/value rows `dlrun results show` prints, and as the flat columns of
`dlrun results export` (csv, jsonl, parquet): every number with its unit, and what could not be read said so."""
from __future__ import annotations

from typing import Any

#: Flat export columns, from a run's provenance["telemetry"].
EXPORT_COLUMNS = ("energy_j", "energy_covers", "energy_per_sample", "energy_per_sample_unit", "samples_per_joule",
                  "mean_power_w", "cpu_mean_util_pct", "cpu_energy_j", "gpu_mean_util_pct", "gpu_mean_power_w",
                  "gpu_max_power_w", "gpu_throttled_device_s", "telemetry_window_s")
_FLOATS = tuple(c for c in EXPORT_COLUMNS if c not in ("energy_covers", "energy_per_sample_unit"))


def export_fields(summary: Any) -> dict[str, Any]:
    """{column: value} for one run (None where the run has no telemetry or the value could not be read)."""
    if not isinstance(summary, dict) or "window" not in summary:
        return dict.fromkeys(EXPORT_COLUMNS)
    gpu = summary.get("gpu") or {}
    per_sample = summary.get("energy_per_sample") or {}
    values = {"energy_j": summary.get("energy_j"), "energy_covers": ", ".join(summary.get("energy_covers") or []),
              "energy_per_sample": per_sample.get("value"), "energy_per_sample_unit": per_sample.get("unit"),
              "samples_per_joule": per_sample.get("samples_per_joule"), "mean_power_w": summary.get("mean_power_w"),
              "cpu_mean_util_pct": (summary.get("cpu") or {}).get("mean_util_pct"),
              "cpu_energy_j": (summary.get("cpu_energy") or {}).get("joules"),
              "gpu_mean_util_pct": gpu.get("mean_util_pct"), "gpu_mean_power_w": gpu.get("mean_power_w"),
              "gpu_max_power_w": gpu.get("max_power_w"), "gpu_throttled_device_s": gpu.get("throttled_device_s"),
              "telemetry_window_s": (summary.get("window") or {}).get("seconds")}
    return {k: (float(v) if k in _FLOATS and isinstance(v, (int, float)) and not isinstance(v, bool) else
                (v if k not in _FLOATS else None)) for k, v in values.items()}


def _value(value: Any, unit: str, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f} {unit}"


def telemetry_rows(summary: Any) -> list[list[str]]:
    """Rows for `results show`: nothing for a run stored without telemetry."""
    if not isinstance(summary, dict):
        return []
    if "window" not in summary:
        return [["telemetry", str(summary.get("why", "none"))]]
    window = summary["window"]
    rows = [["telemetry", f"{summary['nodes']} node(s), {summary['samples']} samples every {summary['period_s']} s; "
                          f"figures over the {window['what']} ({window['seconds']:.1f} s)"]]
    per_sample = summary.get("energy_per_sample") or {}
    if summary.get("energy_j") is not None:
        rows.append(["energy", f"{summary['energy_j']:.1f} J ({', '.join(summary['energy_covers'])}); mean power "
                               f"{_value(summary.get('mean_power_w'), 'W')}"])
    if per_sample.get("value") is not None:
        rows.append(["energy per sample", f"{per_sample['value']:.4g} {per_sample['unit']} "
                                          f"({per_sample['samples_per_joule']:.4g} {per_sample['unit'][2:]}s/J)"])
    else:
        rows.append(["energy per sample", f"none: {per_sample.get('why')}"])
    cpu, cpu_energy = summary.get("cpu") or {}, summary.get("cpu_energy") or {}
    rows.append(["cpu", f"mean utilisation {_value(cpu.get('mean_util_pct'), '%', 1)}, load "
                        f"{_value(cpu.get('mean_load1'), '', 1).strip()}, energy "
                        + (_value(cpu_energy.get("joules"), "J", 1) if cpu_energy.get("readable")
                           else str(cpu_energy.get("why")))])
    gpu = summary.get("gpu")
    if gpu:
        throttled = ", ".join(f"{k} {v:.0f} s" for k, v in gpu["throttled_s"].items()) or "never"
        rows.append(["gpu", f"{gpu['devices']} via {gpu['source']}: mean utilisation "
                            f"{_value(gpu['mean_util_pct'], '%', 1)}, power {_value(gpu['mean_power_w'], 'W', 1)} "
                            f"(max {_value(gpu['max_power_w'], 'W', 1)}), energy {_value(gpu['energy_j'], 'J', 1)}, "
                            f"throttled (device-seconds): {throttled}"])
    return rows
