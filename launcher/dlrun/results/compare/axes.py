"""Modes along an axis: one configuration against a baseline value of the axis, row by row.

relative    systems or sites on the same workloads: throughput relative to the baseline system, rows =
            workloads, columns = device counts, plus the geometric mean of each column (Ren et al., Table III)
scaling     one system over device counts: throughput with its 95 % CI, speedup over the smallest count
            and scaling efficiency = speedup / (devices / baseline devices) (PRACE guide, Tables 8 and 9)
fabrics     one fabric against another: relative difference per row and its average (Samsi et al.'s
            "average reduction of 12.78% images per second" of Ethernet against Omni-Path)
regression  any axis over repeated runs: Welch's t-test per row, "slower by X % (95 % CI a–b %)" or
            "no significant difference"

Every ratio is one of geometric means with Welch's t interval on the logs (dlrun.results.compare.stats.ratio): the
test and the interval are one computation, and an interval on a ratio is always positive. Averages over
rows are geometric means of the rows' ratios.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dlrun.results.parsers.figure_of_merit import LOWER_IS_BETTER
from dlrun.results.compare.stats import change_sentence, geometric_mean, ratio, summarize

from dlrun.results.compare.efficiency import EfficiencyInputs, columns_for, efficiency
from dlrun.results.compare.measured import WORDS
from dlrun.results.compare.types import Axis, Comparison, series_for, sort_value
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


def _with_baseline(mode: str, axis: Axis, cells: dict[tuple, dict[Any, Cell]], baseline: Any,
                   labels: dict[Any, str], notes: list[str]) -> Iterator[tuple[dict[str, Any], dict[Any, Cell], Cell]]:
    """Each row's fields, its cells and its baseline cell; a row without runs at the baseline is left out
    with a note saying so."""
    for series, row in cells.items():
        fields = _series_fields(mode, axis, series)
        base = row.get(baseline)
        if base is None:
            where = ", ".join(f"{k} {v}" for k, v in fields.items())
            notes.append(f"no runs at the baseline {labels[baseline]} for {where}: that row is left out")
            continue
        yield fields, row, base


def relative(groups: list[Group], axis: Axis, requested: str | None) -> Comparison:
    cells, baseline, labels, differences = _prepare("relative", groups, axis, requested)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for fields, row, base in _with_baseline("relative", axis, cells, baseline, labels, notes):
        for value, cell in row.items():
            if value == baseline:
                continue
            interval = ratio(base.values, cell.values)
            rows.append({**fields, axis.name: labels[value], "baseline": labels[baseline],
                         "n": len(cell.values), "geomean": geometric_mean(cell.values),
                         "baseline_n": len(base.values), "baseline_geomean": geometric_mean(base.values),
                         "relative": interval.ratio, "relative_low": interval.low, "relative_high": interval.high,
                         "interval": interval.interval, "unit": cell.unit, "better": _better(cell),
                         "runs": cell.run_ids, "baseline_runs": base.run_ids})
    averages: list[dict[str, Any]] = []
    for value in sorted({r[axis.name] for r in rows}):
        for devices in sorted({r["devices"] for r in rows if r[axis.name] == value}, key=sort_value):
            column = [r["relative"] for r in rows if r[axis.name] == value and r["devices"] == devices]
            averages.append({"workload": "geometric mean", "model": f"{len(column)} rows", "devices": devices,
                             axis.name: value, "baseline": labels[baseline], "relative": geometric_mean(column)})
    columns = [*series_for("relative", axis), axis.name, "baseline", "n", "geomean", "baseline_n", "baseline_geomean",
               "relative", "relative_low", "relative_high", "interval", "unit", "better", "runs", "baseline_runs"]
    return Comparison("relative", f"throughput relative to {labels[baseline]}", columns, rows, axis=axis.name,
                      baseline=labels[baseline], summary_rows=averages, differences=differences, notes=notes)


def scaling(groups: list[Group], axis: Axis, requested: str | None, inputs: EfficiencyInputs) -> Comparison:
    cells, baseline, labels, differences = _prepare("scaling", groups, axis, requested)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    effs: set[str] = set()
    metrics = set()
    for fields, row, base in _with_baseline("scaling", axis, cells, baseline, labels, notes):
        for devices, cell in sorted(row.items(), key=lambda item: sort_value(item[0])):
            stats = summarize(cell.values).to_dict()
            ideal = devices / baseline if isinstance(devices, int) and isinstance(baseline, int) else None
            # the baseline against itself is 1 by definition, not an estimate
            interval = ratio(base.values, cell.values) if devices != baseline else None
            metric = cell.groups[0].metric
            metrics.add(metric)
            scale = (lambda x: None if x is None or not ideal else x / ideal)
            speedup = (1.0, None, None) if interval is None else (interval.ratio, interval.low, interval.high)
            rows.append({**fields, "devices": devices, "nodes": _one(cell, "nodes"), **stats, "unit": cell.unit,
                         "speedup": speedup[0], "speedup_low": speedup[1], "speedup_high": speedup[2],
                         "ideal": ideal, "scaling_efficiency": scale(speedup[0]),
                         "scaling_efficiency_low": scale(speedup[1]), "scaling_efficiency_high": scale(speedup[2]),
                         "speedup_interval": "the baseline: 1 by definition" if interval is None
                         else interval.interval,
                         **efficiency(cell.key, metric, stats["geomean"], inputs, effs), "runs": cell.run_ids})
    extra = [c for m in sorted(metrics) for c in columns_for(m)]
    columns = [*series_for("scaling", axis), "devices", "nodes", "n", "geomean", "ci_low", "ci_high", "interval",
               "stdev", "median", "min", "max", "unit", "speedup", "speedup_low", "speedup_high", "ideal",
               "scaling_efficiency", "scaling_efficiency_low", "scaling_efficiency_high", "speedup_interval", *extra,
               "runs"]
    return Comparison("scaling", f"scaling from {labels[baseline]} device{'s' if baseline != 1 else ''}", columns, rows, axis=axis.name,
                      baseline=baseline, differences=differences, notes=notes + sorted(effs))


def _one(cell: Cell, name: str) -> Any:
    values = cell.field_values(name)
    return values[0] if len(values) == 1 else "/".join(map(str, values))


def _tests(mode: str, groups: list[Group], axis: Axis, requested: str | None) -> tuple:
    """Per row, each axis value against the baseline: the ratio of geometric means, its interval and
    Welch's test, from one computation on the logs."""
    cells, baseline, labels, differences = _prepare(mode, groups, axis, requested)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for fields, row, base in _with_baseline(mode, axis, cells, baseline, labels, notes):
        for value, cell in row.items():
            if value == baseline:
                continue
            r = ratio(base.values, cell.values)
            words = WORDS.get(cell.groups[0].metric, ("slower", "faster"))
            b, o = summarize(base.values), summarize(cell.values)
            rows.append({**fields, axis.name: labels[value], "baseline": labels[baseline],
                         "baseline_n": b.n, "baseline_geomean": b.geomean, "baseline_stdev": b.stdev,
                         "n": o.n, "geomean": o.geomean, "stdev": o.stdev, "unit": cell.unit,
                         "ratio": r.ratio, "ratio_low": r.low, "ratio_high": r.high, "change_pct": _pct(r.ratio),
                         "change_low_pct": _pct(r.low), "change_high_pct": _pct(r.high), "p_value": r.p_value,
                         "welch_t": r.t, "welch_dof": r.dof, "significant": r.significant, "interval": r.interval,
                         "verdict": change_sentence(r, words, _better(cell)), "better": _better(cell),
                         "runs": cell.run_ids, "baseline_runs": base.run_ids})
    return rows, baseline, labels, differences, notes


def _better(cell: Cell) -> str:
    """Which way the cell's metric is better: lower for a latency, higher for every rate."""
    return "lower" if cell.groups[0].metric in LOWER_IS_BETTER else "higher"


def _pct(value: float | None) -> float | None:
    """A ratio as a change in percent of the baseline (0.95 -> -5.0)."""
    return None if value is None else (value - 1.0) * 100.0


TEST_COLUMNS = ["baseline", "baseline_n", "baseline_geomean", "baseline_stdev", "n", "geomean", "stdev", "unit",
                "ratio", "ratio_low", "ratio_high", "change_pct", "change_low_pct", "change_high_pct", "p_value",
                "welch_t", "welch_dof", "significant", "interval", "verdict", "better", "runs", "baseline_runs"]


def fabrics(groups: list[Group], axis: Axis, requested: str | None) -> Comparison:
    rows, baseline, labels, differences, notes = _tests("fabrics", groups, axis, requested)
    averages = []
    for value in sorted({r[axis.name] for r in rows}):
        ratios = [r["ratio"] for r in rows if r[axis.name] == value]
        averages.append({"workload": "geometric mean", "model": f"{len(ratios)} rows", axis.name: value,
                         "baseline": labels[baseline], "ratio": geometric_mean(ratios),
                         "change_pct": _pct(geometric_mean(ratios))})
    return Comparison("fabrics", f"fabrics against {labels[baseline]}", [*series_for("fabrics", axis), axis.name,
                      *TEST_COLUMNS], rows, axis=axis.name, baseline=labels[baseline], summary_rows=averages,
                      differences=differences, notes=notes)


def regression(groups: list[Group], axis: Axis, requested: str | None) -> Comparison:
    rows, baseline, labels, differences, notes = _tests("regression", groups, axis, requested)
    return Comparison("regression", f"{axis.name}: each against {labels[baseline]}",
                      [*series_for("regression", axis), axis.name, *TEST_COLUMNS], rows, axis=axis.name,
                      baseline=labels[baseline], differences=differences, notes=notes)
