"""How a Comparison looks: a rich table per mode (Ren et al.'s Table III pivot for `relative`), CSV, JSON.
Every table says what its numbers are: geometric means, ratios of geometric means, the confidence level
and n per side; an interval that could not be made says why ("too few repeats")."""
from __future__ import annotations

import csv
import sys
from collections.abc import Callable
from typing import Any

from dlrun.cli.output import console, print_json
from dlrun.text import csv_cell, for_rich, plain
from dlrun.text import number as _num, percent as _pct


def _interval(low: Any, high: Any, show: Callable[[Any], str] = _num, why: str = "-") -> str:
    return why if low is None or high is None else f"[{show(low)}, {show(high)}]"


def _no_interval(row: dict[str, Any], key: str = "interval") -> str:
    """The cell where an interval is missing: "too few repeats", or "-"."""
    return "too few repeats" if str(row.get(key, "")).startswith("too few repeats") else "-"


def _signed(value: Any) -> str:
    return "-" if value is None else f"{value:+.1f} %"


def _efficiency(row: dict[str, Any], columns: list[str]) -> list[tuple[str, str]]:
    out = []
    if "achieved_gflops" in columns:
        out += [("GFLOP/s", _num(row.get("achieved_gflops"), 1)), ("of peak", _pct(row.get("of_peak"))),
                ("of matmul", _pct(row.get("of_matmul")))]
    if "of_fabric" in columns:
        out += [("fabric GB/s", _num(row.get("fabric_gbs"))), ("of fabric", _pct(row.get("of_fabric")))]
    return out


def _quality(row: dict[str, Any]) -> list[tuple[str, str]]:
    """The point's verdict beside its numbers (dlrun.results.quality); the reasons are listed below the table."""
    return [("quality", str(row.get("quality") or "unknown"))] if "quality" in row else []


def _stats(row: dict[str, Any]) -> list[tuple[str, str]]:
    return [("n", str(row["n"])), ("geo. mean", _num(row["geomean"])),
            ("95 % CI", _interval(row["ci_low"], row["ci_high"], why=_no_interval(row))), ("sd", _num(row["stdev"]))]


def _summary_cells(row, columns):
    return [("workload", row["workload"]), ("model", str(row["model"])), ("system", str(row["system"])),
            ("devices", str(row["devices"])), ("precision", str(row["precision"])),
            ("batch/dev", str(row["batch_per_device"])), *_stats(row), *_efficiency(row, columns), *_quality(row)]


def _reference_cells(row, columns):
    source = row["source_where"] or row["source_doc"]  # the document and its words are printed below
    return [("workload", row["workload"]), ("system", str(row["system"])), ("devices", str(row["devices"])),
            ("precision", str(row["precision"])), *_stats(row)[:3], ("reference", _num(row["reference"])),
            ("ratio", _pct(row["ratio"])), ("verdict", _verdict(row) + _quality_note(row)), ("source", source),
            *_efficiency(row, columns)]


def _quality_note(row: dict[str, Any]) -> str:
    """The point's quality verdict after the verdict against the published number, unless ok (a column of its
    own would push this wide table past the terminal)."""
    return f"; quality {row['quality']}" if row.get("quality") not in (None, "ok") else ""


def _verdict(row: dict[str, Any]) -> str:
    text = {"outside": "OUTSIDE"}.get(row["verdict"], row["verdict"]) + f" (±{row['tolerance'] * 100:g} %)"
    if row["verdict"] == "inconclusive":
        if str(row.get("interval", "")).startswith("too few repeats"):
            text += ": too few repeats"
        if row.get("repeats_needed"):
            text += f"; ~{row['repeats_needed']} repeats would decide"
    return text


def _scaling_cells(row, columns):
    why = "(baseline)" if str(row.get("speedup_interval", "")).startswith("the baseline") \
        else _no_interval(row, "speedup_interval")
    speedup = _interval(row["speedup_low"], row["speedup_high"], why=why)
    efficiency = _interval(row["scaling_efficiency_low"], row["scaling_efficiency_high"], _pct, why=why)
    return [("workload", row["workload"]), ("devices", str(row["devices"])), ("nodes", str(row["nodes"])),
            *_stats(row)[:3], ("speedup", f"{_num(row['speedup'])} {speedup}"),
            ("scaling eff.", f"{_pct(row['scaling_efficiency'])} {efficiency}"), *_efficiency(row, columns),
            *_quality(row)]


def _test_cells(axis: str):
    def cells(row, columns):
        # the device count is a column of its own unless it is the axis compared along (then it is that column)
        devices = [("devices", str(row["devices"]))] if "devices" in row and axis != "devices" else []
        return [("workload", row["workload"]), *devices, (axis, str(row[axis])),
                ("baseline geo. mean", f"{_num(row['baseline_geomean'])} (n={row['baseline_n']})"),
                ("geo. mean", f"{_num(row['geomean'])} (n={row['n']})"), ("ratio", _num(row["ratio"], 3)),
                ("change", _signed(row["change_pct"])), ("verdict", row["verdict"]), *_quality(row)]
    return cells


def _history_cells(row, columns):
    interval = _interval(row["interval_low"], row["interval_high"])
    return [("run", row["run_id"]), ("workload", row["workload"]), ("system", str(row["system"])),
            ("devices", str(row["devices"])), ("value", _num(row["value"])),
            ("baseline median", f"{_num(row['history_median'])} (n={row['history_n']})"),
            ("95 % pred. interval", interval), ("change", _signed(row["deviation_pct"])),
            ("verdict", row["verdict"].upper() if row["verdict"] in ("below baseline", "worse than baseline")
             else row["verdict"]), ("why", row["verdict_why"])]


def _print_rows(title: str, rows: list[dict[str, Any]], cells, columns: list[str],
                summary: list[list[str]] | None = None) -> None:
    from rich.table import Table

    table = Table(title=for_rich(title, newlines=False))
    laid_out = [cells(row, columns) for row in rows]
    for header, _ in (laid_out[0] if laid_out else []):
        table.add_column(header)
    for row in laid_out:
        table.add_row(*(for_rich(cell) for _, cell in row))
    for row in summary or []:
        table.add_row(*(for_rich(cell) for cell in row), style="bold")
    console().print(table)


def _relative(comparison) -> None:
    """Ren et al.'s Table III: workloads down, device counts across, each cell other / baseline."""
    from rich.table import Table

    axis = comparison.axis
    rows = comparison.rows + comparison.summary_rows
    devices = sorted({r["devices"] for r in rows}, key=lambda d: (not isinstance(d, int), str(d).zfill(9)))
    table = Table(title=for_rich(_title(comparison), newlines=False))
    for header in ("workload", "model", axis):
        table.add_column(header)
    for count in devices:
        table.add_column(f"{count} device{'s' if count != 1 else ''}")
    seen: dict[tuple, dict[Any, str]] = {}
    for r in rows:
        cell = _pct(r["relative"], 2)
        if "relative_low" in r:
            cell += " " + _interval(r["relative_low"], r["relative_high"], lambda v: f"{v * 100:.1f}",
                                    why=_no_interval(r)) + f" n={r['n']}/{r['baseline_n']}"
        if r.get("quality") not in (None, "ok"):
            cell += f" ({r['quality']})"
        seen.setdefault((r["workload"], r["model"], r[axis]), {})[r["devices"]] = cell
    for (workload, model, value), cells in seen.items():
        shown = (workload, model, value, *(cells.get(d, "-") for d in devices))
        table.add_row(*(for_rich(cell) for cell in shown),
                      style="bold" if workload == "geometric mean" else None)
    console().print(table)


def _title(comparison) -> str:
    unit = f" ({comparison.unit})" if comparison.unit else ""
    flag = "  [NOT LIKE-FOR-LIKE]" if not comparison.like_for_like else ""
    return f"compare {comparison.mode}: {comparison.title}{unit}{flag}"


#: What each mode's numbers are, printed under its table.
MEANING = {
    "summary": "geo. mean: geometric mean of the n repeats; 95 % CI: t interval on their logs (none below {m} "
               "repeats); sd: standard deviation of the repeats",
    "reference": "geo. mean of the n repeats with its 95 % CI (t on logs); ratio: geo. mean / published value; "
                 "verdict: within when the CI lies inside the tolerance band, OUTSIDE when wholly outside it, "
                 "else inconclusive",
    "scaling": "geo. mean of the n repeats, 95 % CI: t on logs; speedup: ratio of geometric means over the "
               "baseline's, 95 % CI: Welch's t on logs; scaling eff.: speedup / ideal speedup",
    "relative": "each cell: ratio of geometric means (value / baseline) with its 95 % CI (Welch's t on logs) "
                "in percent, and n=repeats/baseline repeats; bold: geometric mean of the column's ratios",
    "history": "baseline median: the median of the last n ok runs of the run's key (its site and machine) stored "
               "before it; 95 % pred. interval: where one more such run falls 95 % of the time (t on the logs "
               "of those runs); change: the run against that median; BELOW BASELINE: under the interval and "
               "beyond the tolerance",
    "regression": "ratio of geometric means (value / baseline), n per side; change and its 95 % CI from "
                  "Welch's t on logs, the same computation as the test (p)",
}


def _meaning(comparison) -> str:
    text = MEANING.get(comparison.mode, MEANING["regression"])
    return text.format(m=comparison.statistics.get("min_repeats", 3))


def _telling_apart(comparison, cells):
    """`cells` with a site and a machine column where the runs come from more than one (unless that is the axis
    compared along, whose column says it): rows that look alike otherwise are told apart on the row itself."""
    extra = [(name, label) for name, label, many in (
        ("site", "site", len(comparison.sites) > 1), ("host", "machine", len(comparison.machines) > 1))
        if many and comparison.axis != name]
    if not extra:
        return cells

    def told(row, columns):
        from dlrun.results.key import machine_label

        laid = cells(row, columns)
        shown = [(label, str(row.get("site")) if name == "site" else machine_label(row)) for name, label in extra]
        return [*laid[:1], *shown, *laid[1:]]
    return told


def print_table(comparison) -> None:
    mode = comparison.mode
    if mode == "relative":
        _relative(comparison)
    else:
        cells = _telling_apart(comparison, {"summary": _summary_cells, "reference": _reference_cells,
                                            "scaling": _scaling_cells, "history": _history_cells}.get(mode)
                               or _test_cells(comparison.axis))
        summary = None
        if comparison.summary_rows:
            width = len(cells(comparison.rows[0], comparison.columns)) if comparison.rows else 0
            summary = [[f"geometric mean of {r['model']}", *([""] * (width - 4)), _num(r["ratio"], 3),
                        _signed(r["change_pct"]), ""] for r in comparison.summary_rows] if width else None
        _print_rows(_title(comparison), comparison.rows, cells, comparison.columns, summary)
    out = console()
    out.print(f"[dim]{_meaning(comparison)}[/]", highlight=False)
    if not comparison.like_for_like:
        out.print("[bold red]not like-for-like[/] (compared anyway, --allow-mismatch):", highlight=False)
        for line in comparison.differences:
            out.print(f"  {plain(line)}", markup=False)
    print_provenance(comparison)
    for line in comparison.notes:
        out.print(f"note: {plain(line)}", style="dim", markup=False, highlight=False)


def print_provenance(comparison) -> None:
    """Which sites and machines the runs come from, how many are not ok, and why each point is not."""
    from dlrun.results.quality import not_ok_sentence

    out = console()
    if comparison.sites:  # stored strings (a bundle's): shown as data
        out.print(plain(f"sites: {', '.join(comparison.sites)}; machines: {'; '.join(comparison.machines)}"),
                  markup=False, highlight=False)
    if comparison.quality:
        bad = any(verdict != "ok" for verdict in comparison.quality)
        out.print(("[yellow]" if bad else "") + not_ok_sentence(comparison.quality) + ("[/]" if bad else ""),
                  highlight=False)
    for row in comparison.rows:
        if row.get("quality_reasons"):
            where = ", ".join(f"{name} {row[name]}" for name in dict.fromkeys(("workload", "model", "devices",
                                                                               comparison.axis)) if name in row)
            out.print(plain(f"  {row['quality']}: {where}: {'; '.join(row['quality_reasons'])}"), markup=False,
                      highlight=False)


def print_csv(comparison) -> None:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(["row_kind", *comparison.columns, "like_for_like"])
    for kind, rows in (("row", comparison.rows), ("average", comparison.summary_rows)):
        for row in rows:
            writer.writerow([kind, *(_csv(row.get(c)) for c in comparison.columns), comparison.like_for_like])


def _csv(value: Any) -> Any:
    """A cell of the CSV printed to standard output (often a terminal): no control characters, and nothing a
    spreadsheet would evaluate."""
    if value is None:
        return ""
    if isinstance(value, list):
        value = " ".join(map(str, value))
    return csv_cell(plain(value)) if isinstance(value, str) else value


def render(comparison, fmt: str) -> None:
    if fmt == "json":
        print_json(comparison.to_dict())
    elif fmt == "csv":
        print_csv(comparison)
    else:
        print_table(comparison)
