"""How a Comparison looks: a rich table per mode (Ren et al.'s Table III pivot for `relative`), CSV, JSON."""
from __future__ import annotations

import csv
import sys
from collections.abc import Callable
from typing import Any

from dlrun.cli.output import console, print_json


def _num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, str):
        return value
    return f"{value:,.{digits}f}"


def _pct(value: Any, digits: int = 1) -> str:
    return "unknown" if value is None else value if isinstance(value, str) else f"{value * 100:.{digits}f} %"


def _interval(low: Any, high: Any, show: Callable[[Any], str] = _num) -> str:
    return "-" if low is None or high is None else f"[{show(low)}, {show(high)}]"


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
    return [("n", str(row["n"])), ("mean", _num(row["mean"])), ("95 % CI", _interval(row["ci_low"], row["ci_high"])),
            ("sd", _num(row["stdev"]))]


def _summary_cells(row, columns):
    return [("workload", row["workload"]), ("model", str(row["model"])), ("system", str(row["system"])),
            ("devices", str(row["devices"])), ("precision", str(row["precision"])),
            ("batch/dev", str(row["batch_per_device"])), *_stats(row), *_efficiency(row, columns), *_quality(row)]


def _reference_cells(row, columns):
    source = row["source_where"] or row["source_doc"]  # the document and its words are printed below
    return [("workload", row["workload"]), ("system", str(row["system"])), ("devices", str(row["devices"])),
            ("precision", str(row["precision"])), *_stats(row)[:3], ("reference", _num(row["reference"])),
            ("ratio", _pct(row["ratio"])), ("within", ("yes" if row["within"] else "NO")
                                             + f" (±{row['tolerance'] * 100:g} %)"),
            ("source", source), *_efficiency(row, columns), *_quality(row)]


def _scaling_cells(row, columns):
    return [("workload", row["workload"]), ("devices", str(row["devices"])), ("nodes", str(row["nodes"])),
            *_stats(row)[:3], ("speedup", f"{_num(row['speedup'])} {_interval(row['speedup_low'], row['speedup_high'])}"),
            ("scaling eff.", f"{_pct(row['scaling_efficiency'])} "
                             f"{_interval(row['scaling_efficiency_low'], row['scaling_efficiency_high'], _pct)}"),
            *_efficiency(row, columns), *_quality(row)]


def _test_cells(axis: str):
    def cells(row, columns):
        return [("workload", row["workload"]), *([("devices", str(row["devices"]))] if "devices" in row else []),
                (axis, str(row[axis])), ("baseline", f"{_num(row['baseline_mean'])} (n={row['baseline_n']})"),
                ("mean", f"{_num(row['mean'])} (n={row['n']})"), ("change", _signed(row["change_pct"])),
                ("verdict", row["verdict"]), *_quality(row)]
    return cells


def _print_rows(title: str, rows: list[dict[str, Any]], cells, columns: list[str],
                summary: list[list[str]] | None = None) -> None:
    from rich.table import Table

    table = Table(title=title)
    laid_out = [cells(row, columns) for row in rows]
    for header, _ in (laid_out[0] if laid_out else []):
        table.add_column(header)
    for row in laid_out:
        table.add_row(*(cell for _, cell in row))
    for row in summary or []:
        table.add_row(*row, style="bold")
    console().print(table)


def _relative(comparison) -> None:
    """Ren et al.'s Table III: workloads down, device counts across, each cell other / baseline."""
    from rich.table import Table

    axis = comparison.axis
    rows = comparison.rows + comparison.summary_rows
    devices = sorted({r["devices"] for r in rows}, key=lambda d: (not isinstance(d, int), str(d).zfill(9)))
    table = Table(title=_title(comparison))
    for header in ("workload", "model", axis):
        table.add_column(header)
    for count in devices:
        table.add_column(f"{count} device{'s' if count != 1 else ''}")
    seen: dict[tuple, dict[Any, str]] = {}
    for r in rows:
        cell = _pct(r["relative"], 2)
        if "relative_low" in r:
            cell += f" {_interval(r['relative_low'], r['relative_high'], lambda v: f'{v * 100:.1f}')}"
        if r.get("quality") not in (None, "ok"):
            cell += f" ({r['quality']})"
        seen.setdefault((r["workload"], r["model"], r[axis]), {})[r["devices"]] = cell
    for (workload, model, value), cells in seen.items():
        table.add_row(workload, str(model), str(value), *(cells.get(d, "-") for d in devices),
                      style="bold" if workload == "average" else None)
    console().print(table)


def _title(comparison) -> str:
    unit = f" ({comparison.unit})" if comparison.unit else ""
    flag = "  [NOT LIKE-FOR-LIKE]" if not comparison.like_for_like else ""
    return f"compare {comparison.mode}: {comparison.title}{unit}{flag}"


def print_table(comparison) -> None:
    mode = comparison.mode
    if mode == "relative":
        _relative(comparison)
    else:
        cells = {"summary": _summary_cells, "reference": _reference_cells,
                 "scaling": _scaling_cells}.get(mode) or _test_cells(comparison.axis)
        summary = None
        if comparison.summary_rows:
            width = len(cells(comparison.rows[0], comparison.columns)) if comparison.rows else 0
            summary = [[f"average of {r['model']}", *([""] * (width - 3)), _signed(r["change_pct"]), ""]
                       for r in comparison.summary_rows] if width else None
        _print_rows(_title(comparison), comparison.rows, cells, comparison.columns, summary)
    out = console()
    if not comparison.like_for_like:
        out.print("[bold red]not like-for-like[/] (compared anyway, --allow-mismatch):", highlight=False)
        for line in comparison.differences:
            out.print(f"  {line}", markup=False)
    print_provenance(comparison)
    for line in comparison.notes:
        out.print(f"[dim]note: {line}[/]", highlight=False)


def print_provenance(comparison) -> None:
    """Which sites and machines the runs come from, how many are not ok, and why each point is not."""
    from dlrun.results.quality import not_ok_sentence

    out = console()
    if comparison.sites:
        out.print(f"sites: {', '.join(comparison.sites)}; machines: {'; '.join(comparison.machines)}", markup=False,
                  highlight=False)
    if comparison.quality:
        bad = any(verdict != "ok" for verdict in comparison.quality)
        out.print(("[yellow]" if bad else "") + not_ok_sentence(comparison.quality) + ("[/]" if bad else ""),
                  highlight=False)
    for row in comparison.rows:
        if row.get("quality_reasons"):
            where = ", ".join(f"{name} {row[name]}" for name in dict.fromkeys(("workload", "model", "devices",
                                                                               comparison.axis)) if name in row)
            out.print(f"  {row['quality']}: {where}: {'; '.join(row['quality_reasons'])}", markup=False,
                      highlight=False)


def print_csv(comparison) -> None:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(["row_kind", *comparison.columns, "like_for_like"])
    for kind, rows in (("row", comparison.rows), ("average", comparison.summary_rows)):
        for row in rows:
            writer.writerow([kind, *(_csv(row.get(c)) for c in comparison.columns), comparison.like_for_like])


def _csv(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(map(str, value))
    return value


def render(comparison, fmt: str) -> None:
    if fmt == "json":
        print_json(comparison.to_dict())
    elif fmt == "csv":
        print_csv(comparison)
    else:
        print_table(comparison)
