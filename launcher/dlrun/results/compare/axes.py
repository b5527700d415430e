"""Modes along an axis: one configuration against a baseline value of the axis, row by row.

relative    systems or sites on the same workloads: throughput relative to the baseline system, rows =
            workloads, columns = device counts, plus the average of each column (Ren et al., Table III)
scaling     one system over device counts: throughput with its 95 % CI, speedup over the smallest count
            and scaling efficiency = speedup / (devices / baseline devices) (PRACE guide, Tables 8 and 9)
fabrics     one fabric against another: relative difference per row and its average (Samsi et al.'s
            "average reduction of 12.78% images per second" of Ethernet against Omni-Path)
regression  any axis over repeated runs: Welch's t-test per row, "slower by X % (95 % CI a–b %)" or
            "no significant difference", and a bootstrap interval of the ratio of means
"""
from __future__ import annotations

from typing import Any

from dlrun.results.stats import RatioInterval, mean, ratio_interval, summarize, verdict

from dlrun.results.compare.efficiency import EfficiencyInputs, columns_for, efficiency
from dlrun.results.compare.model import Axis, Comparison, series_for, sort_value
from dlrun.results.compare.select import Cell, Group, axis_label, guard, pick_baseline, place


def _series_fields(mode: str, axis: Axis, row: tuple) -> dict[str, Any]:
    return dict(zip(series_for(mode, axis), row))


def _prepare(mode: str, groups: list[Group], axis: Axis, requested: str | None):
    cells = place(groups, axis, series_for(mode, axis))
    values = sorted({value for row in cells.values() for value in row}, key=sort_value)
    images: dict[Any, list[str]] = {}
    for group in groups:
        images.setdefault(group.axis_value(axis), [])
        images[group.axis_value(axis)] = sorted(set(images[group.axis_value(axis)]) | set(group.images))
    baseline = pick_baseline(axis, values, requested, images if axis.name == "image" else {})
    labels = {value: axis_label(value, images.get(value, []) if axis.name == "image" else []) for value in values}
    return cells, baseline, labels, guard(cells, axis, series_for(mode, axis))


def _missing_baseline(notes: list[str], series: dict[str, Any], label: str) -> None:
    where = ", ".join(f"{k} {v}" for k, v in series.items())
    notes.append(f"no runs at the baseline {label} for {where}: that row is left out")


def relative(groups: list[Group], axis: Axis, requested: str | None) -> Comparison:
    cells, baseline, labels, differences = _prepare("relative", groups, axis, requested)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for series, row in cells.items():
        fields = _series_fields("relative", axis, series)
        base = row.get(baseline)
        if base is None:
            _missing_baseline(notes, fields, labels[baseline])
            continue
        for value, cell in row.items():
            if value == baseline:
                continue
            interval = ratio_interval(base.values, cell.values)
            rows.append({**fields, axis.name: labels[value], "baseline": labels[baseline],
                         "n": len(cell.values), "mean": mean(cell.values), "baseline_n": len(base.values),
                         "baseline_mean": mean(base.values), "relative": interval.ratio,
                         "relative_low": interval.low, "relative_high": interval.high,
                         "interval": interval.method, "unit": cell.unit,
                         "runs": cell.run_ids, "baseline_runs": base.run_ids})
    averages: list[dict[str, Any]] = []
    for value in sorted({r[axis.name] for r in rows}):
        for devices in sorted({r["devices"] for r in rows if r[axis.name] == value}, key=sort_value):
            column = [r["relative"] for r in rows if r[axis.name] == value and r["devices"] == devices]
            averages.append({"workload": "average", "model": f"{len(column)} rows", "devices": devices,
                             axis.name: value, "baseline": labels[baseline], "relative": mean(column)})
    columns = [*series_for("relative", axis), axis.name, "baseline", "n", "mean", "baseline_n", "baseline_mean",
               "relative", "relative_low", "relative_high", "interval", "unit", "runs", "baseline_runs"]
    return Comparison("relative", f"throughput relative to {labels[baseline]}", columns, rows, axis=axis.name,
                      baseline=labels[baseline], summary_rows=averages, differences=differences, notes=notes)


def scaling(groups: list[Group], axis: Axis, requested: str | None, inputs: EfficiencyInputs) -> Comparison:
    cells, baseline, labels, differences = _prepare("scaling", groups, axis, requested)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    effs: set[str] = set()
    metrics = set()
    for series, row in cells.items():
        fields = _series_fields("scaling", axis, series)
        base = row.get(baseline)
        if base is None:
            _missing_baseline(notes, fields, labels[baseline])
            continue
        for devices, cell in sorted(row.items(), key=lambda item: sort_value(item[0])):
            stats = summarize(cell.values).to_dict()
            ideal = devices / baseline if isinstance(devices, int) and isinstance(baseline, int) else None
            # the baseline against itself is 1 by definition, not a resampled estimate
            interval = RatioInterval(1.0, None, None, "none") if devices == baseline \
                else ratio_interval(base.values, cell.values)
            metric = cell.groups[0].metric
            metrics.add(metric)
            scale = (lambda x: None if x is None or not ideal else x / ideal)
            rows.append({**fields, "devices": devices, "nodes": _one(cell, "nodes"), **stats, "unit": cell.unit,
                         "speedup": interval.ratio, "speedup_low": interval.low, "speedup_high": interval.high,
                         "ideal": ideal, "scaling_efficiency": scale(interval.ratio),
                         "scaling_efficiency_low": scale(interval.low),
                         "scaling_efficiency_high": scale(interval.high), "interval": interval.method,
                         **efficiency(cell.key, metric, stats["mean"], inputs, effs), "runs": cell.run_ids})
    extra = [c for m in sorted(metrics) for c in columns_for(m)]
    columns = [*series_for("scaling", axis), "devices", "nodes", "n", "mean", "ci_low", "ci_high", "stdev", "median",
               "min", "max", "unit", "speedup", "speedup_low", "speedup_high", "ideal", "scaling_efficiency",
               "scaling_efficiency_low", "scaling_efficiency_high", "interval", *extra, "runs"]
    return Comparison("scaling", f"scaling from {labels[baseline]} device{'s' if baseline != 1 else ''}", columns, rows, axis=axis.name,
                      baseline=baseline, differences=differences, notes=notes + sorted(effs))


def _one(cell: Cell, name: str) -> Any:
    values = cell.field_values(name)
    return values[0] if len(values) == 1 else "/".join(map(str, values))


def _tests(mode: str, groups: list[Group], axis: Axis, requested: str | None) -> tuple:
    """Per row, each axis value against the baseline: Welch's test and the bootstrap ratio."""
    cells, baseline, labels, differences = _prepare(mode, groups, axis, requested)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for series, row in cells.items():
        fields = _series_fields(mode, axis, series)
        base = row.get(baseline)
        if base is None:
            _missing_baseline(notes, fields, labels[baseline])
            continue
        for value, cell in row.items():
            if value == baseline:
                continue
            sentence, test = verdict(base.values, cell.values)
            interval = ratio_interval(base.values, cell.values)
            b, o = summarize(base.values), summarize(cell.values)
            pct = 100.0 / b.mean
            rows.append({**fields, axis.name: labels[value], "baseline": labels[baseline],
                         "baseline_n": b.n, "baseline_mean": b.mean, "baseline_stdev": b.stdev,
                         "n": o.n, "mean": o.mean, "stdev": o.stdev, "unit": cell.unit,
                         "change_pct": (o.mean - b.mean) * pct,
                         "change_low_pct": None if test is None else test.diff_low * pct,
                         "change_high_pct": None if test is None else test.diff_high * pct,
                         "p_value": None if test is None else test.p_value,
                         "welch_t": None if test is None else test.t, "welch_dof": None if test is None else test.dof,
                         "ratio": interval.ratio, "ratio_low": interval.low, "ratio_high": interval.high,
                         "interval": interval.method, "verdict": sentence,
                         "runs": cell.run_ids, "baseline_runs": base.run_ids})
    return rows, baseline, labels, differences, notes


TEST_COLUMNS = ["baseline", "baseline_n", "baseline_mean", "baseline_stdev", "n", "mean", "stdev", "unit",
                "change_pct", "change_low_pct", "change_high_pct", "p_value", "welch_t", "welch_dof", "ratio",
                "ratio_low", "ratio_high", "interval", "verdict", "runs", "baseline_runs"]


def fabrics(groups: list[Group], axis: Axis, requested: str | None) -> Comparison:
    rows, baseline, labels, differences, notes = _tests("fabrics", groups, axis, requested)
    averages = []
    for value in sorted({r[axis.name] for r in rows}):
        changes = [r["change_pct"] for r in rows if r[axis.name] == value]
        averages.append({"workload": "average", "model": f"{len(changes)} rows", axis.name: value,
                         "baseline": labels[baseline], "change_pct": mean(changes)})
    return Comparison("fabrics", f"fabrics against {labels[baseline]}", [*series_for("fabrics", axis), axis.name,
                      *TEST_COLUMNS], rows, axis=axis.name, baseline=labels[baseline], summary_rows=averages,
                      differences=differences, notes=notes)


def regression(groups: list[Group], axis: Axis, requested: str | None) -> Comparison:
    rows, baseline, labels, differences, notes = _tests("regression", groups, axis, requested)
    return Comparison("regression", f"{axis.name}: each against {labels[baseline]}",
                      [*series_for("regression", axis), axis.name, *TEST_COLUMNS], rows, axis=axis.name,
                      baseline=labels[baseline], differences=differences, notes=notes)
