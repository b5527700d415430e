"""The report's tables: compare's rows shaped with pandas (selected, formatted, pivoted into Ren et al.'s
Table III layout), written as HTML whose rows carry an anchor and a tooltip with their provenance."""
from __future__ import annotations

from collections.abc import Iterable
from html import escape
from typing import Any

from dlrun.report.gather import IDS_PER_ROW, Published, Report


def num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return f"{value:,.{digits}f}"


def pct(value: Any, digits: int = 1) -> str:
    return "-" if value is None else value if isinstance(value, str) else f"{value * 100:.{digits}f} %"


def interval(low: Any, high: Any, show=num) -> str:
    return "" if low is None or high is None else f" [{show(low)}, {show(high)}]"


def html_table(frame, *, ids: Iterable[str] | None = None, titles: Iterable[str] | None = None,
               raw: Iterable[str] = (), table_id: str = "", caption: str = "") -> str:
    """A DataFrame as an HTML table: cells escaped except the columns in `raw` (links made here), each row
    with its anchor (`ids`) and tooltip (`titles`)."""
    raw = set(raw)
    ids = list(ids) if ids is not None else [""] * len(frame)
    titles = list(titles) if titles is not None else [""] * len(frame)
    out = [f'<table id="{escape(table_id)}">' if table_id else "<table>"]
    if caption:
        out.append(f"<caption>{escape(caption)}</caption>")
    out.append("<thead><tr>" + "".join(f"<th>{escape(str(c))}</th>" for c in frame.columns) + "</tr></thead><tbody>")
    for anchor, title, values in zip(ids, titles, frame.itertuples(index=False, name=None)):
        attrs = (f' id="{escape(anchor)}"' if anchor else "") + (f' title="{escape(title)}"' if title else "")
        cells = "".join(f"<td>{value if column in raw else escape('' if value is None else str(value))}</td>"
                        for column, value in zip(frame.columns, values))
        out.append(f"<tr{attrs}>{cells}</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def quality_mark(row: dict[str, Any]) -> str:
    """A point's verdict as HTML: marked yellow unless ok, its reasons on hover."""
    verdict = str(row.get("quality") or "unknown")
    if verdict == "ok":
        return "ok"
    why = "; ".join(row.get("quality_reasons") or [])
    return f'<span class="q-mark" title="{escape(why)}">{escape(verdict)}</span>'


def run_links(run_ids: list[str], listed: set[str]) -> str:
    shown = [f'<a href="#run-{escape(r)}">{escape(r)}</a>' if r in listed else escape(r) for r in run_ids[:IDS_PER_ROW]]
    more = len(run_ids) - IDS_PER_ROW
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def scaling_table(report: Report) -> str:
    """Per line (system): throughput with its 95 % CI, speedup and scaling efficiency with theirs."""
    import pandas as pd

    listed = report.listed()
    rows = []
    for p in report.points:
        r = p.row
        rows.append({"system": p.line, "workload": p.series[0], "model": p.series[1], "devices": p.devices,
                     "nodes": r.get("nodes"), "n": r["n"], "mean": num(r["mean"]),
                     "95 % CI": interval(r["ci_low"], r["ci_high"]).strip() or "-",
                     "speedup": num(r["speedup"]) + interval(r["speedup_low"], r["speedup_high"]),
                     "scaling efficiency": pct(r["scaling_efficiency"])
                     + interval(r["scaling_efficiency_low"], r["scaling_efficiency_high"], pct),
                     "of peak": pct(r.get("of_peak")), "of matmul": pct(r.get("of_matmul")),
                     "quality": quality_mark(r), "site": ", ".join(p.sites), "image": ", ".join(p.images),
                     "runs": run_links(p.run_ids, listed)})
    frame = pd.DataFrame(rows)
    for column in ("of peak", "of matmul"):
        if (frame[column] == "-").all():
            frame = frame.drop(columns=column)
    unit = f" ({report.unit})" if report.unit else ""
    return html_table(frame, ids=[p.anchor for p in report.points], titles=[p.provenance() for p in report.points],
                      raw=["runs", "quality"], table_id="scaling",
                      caption=f"Throughput{unit}, speedup and scaling efficiency over the fewest devices of each "
                              "system, with 95 % intervals (t for the mean, bootstrap for the ratios)")


def relative_table(report: Report) -> str:
    """Ren et al.'s Table III: workloads and systems down, device counts across, each system / baseline."""
    import pandas as pd

    comparison = report.relative
    assert comparison is not None
    cells = []
    for r in comparison.rows:
        text = pct(r["relative"], 1) + interval(r.get("relative_low"), r.get("relative_high"), pct)
        title = (f"{r['system']}: mean {num(r['mean'])} of {r['n']} run(s) against {comparison.baseline}: "
                 f"{num(r['baseline_mean'])} of {r['baseline_n']}; runs {', '.join(r['runs'][:IDS_PER_ROW])}")
        mark = "" if r.get("quality") == "ok" else " " + quality_mark(r)
        cells.append({"workload": r["workload"], "model": r["model"], "system": r["system"],
                      "devices": r["devices"], "cell": f'<span title="{escape(title)}">{escape(text)}</span>{mark}'})
    for r in comparison.summary_rows:
        cells.append({"workload": "average", "model": r["model"], "system": r["system"], "devices": r["devices"],
                      "cell": f"<b>{escape(pct(r['relative'], 1))}</b>"})
    if not cells:
        return "<p>No row has runs at the baseline system.</p>"
    frame = pd.DataFrame(cells)
    table = frame.pivot_table(index=["workload", "model", "system"], columns="devices", values="cell",
                              aggfunc="first", sort=False).fillna("-")
    table.columns = [f"{d} device{'s' if d != 1 else ''}" for d in table.columns]
    table = table.reset_index()
    return html_table(table, raw=[c for c in table.columns if c.endswith(("device", "devices"))], table_id="relative",
                      caption=f"Throughput relative to {comparison.baseline}, with 95 % bootstrap intervals "
                              "(hover a cell for its runs)")


def fabrics_table(report: Report) -> str:
    """Each fabric against the baseline fabric of its system: change with its interval and Welch's verdict
    (Samsi et al.)."""
    import pandas as pd

    rows = []
    for system, comparison in report.fabrics:
        rows += [{"system": system, "workload": r["workload"], "model": r["model"], "devices": r.get("devices"),
                  "fabric": r["fabric"], "baseline": r["baseline"],
                  "baseline mean": f"{num(r['baseline_mean'])} (n={r['baseline_n']})",
                  "mean": f"{num(r['mean'])} (n={r['n']})",
                  "change": "-" if r["change_pct"] is None else f"{r['change_pct']:+.1f} %"
                  + interval(r["change_low_pct"], r["change_high_pct"], lambda v: f"{v:+.1f} %"),
                  "verdict": r["verdict"], "quality": quality_mark(r)} for r in comparison.rows]
        rows += [{"system": system, "workload": "average", "model": r["model"], "devices": "", "fabric": r["fabric"],
                  "baseline": r["baseline"], "baseline mean": "", "mean": "", "change": f"{r['change_pct']:+.1f} %",
                  "verdict": "", "quality": ""} for r in comparison.summary_rows]
    if not rows:
        return "<p>No row has runs on the baseline fabric.</p>"
    return html_table(pd.DataFrame(rows), table_id="fabrics", raw=["quality"],
                      caption="Fabrics against the baseline fabric of each system (Welch's t-test per row)")


def published_table(report: Report) -> str:
    import pandas as pd

    def measured(row: Published) -> str:
        if row.measured is None:
            return "-"
        return num(row.measured) + (interval(*row.ci) if row.ci else "") + f" (n={row.runs})"

    rows = [{"reference": r.ref_id, "published": r.text, "measured (95 % CI)": measured(r),
             "measured / published": "-" if r.ratio is None else f"{r.ratio:.3f}", "verdict": r.verdict,
             "why": r.why, "points": "; ".join(r.points), "source": f"{r.doc}, {r.where}",
             "quote": f"<q>{escape(r.quote)}</q>"} for r in report.published]
    return html_table(pd.DataFrame(rows), ids=[r.anchor for r in report.published],
                      titles=[r.provenance() for r in report.published], raw=["quote"], table_id="published",
                      caption="Published numbers of the experiment against the stored points (drawn as open "
                              "diamonds where they name one throughput of one configuration)")


RUN_COLUMNS = ["id", "created_at", "status", "workload", "model", "system", "site", "origin", "image",
               "image_digest", "world_size", "nodes", "fabric", "precision", "batch_size", "experiment", "point"]


def runs_table(report: Report) -> str:
    import pandas as pd

    frame = pd.DataFrame(report.runs, columns=[*RUN_COLUMNS, "value", "unit"])
    frame["value"] = [("-" if v is None else f"{v:.4g} {u}") for v, u in zip(frame["value"], frame["unit"])]
    frame = frame.drop(columns="unit").astype(object).where(frame.notna(), "")
    titles = [f"run {r['id']}: {r['workload']} on {r['system']} at site {r['site']}, image {r['image']} "
              f"{r['image_digest'] or ''}" for r in report.runs]
    return html_table(frame, ids=[f"run-{r['id']}" for r in report.runs], titles=titles, table_id="runs",
                      caption=f"The newest {len(report.runs)} of {report.runs_total} selected runs "
                              "(dlrun results show RUN_ID for everything stored about one)")
