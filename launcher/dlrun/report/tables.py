"""The report's tables: compare's rows shaped with pandas (selected, formatted, pivoted into Ren et al.'s
Table III layout), written as HTML whose rows carry an anchor and a tooltip with their provenance. Each
column says what its number is (geometric mean, ratio of geometric means, the interval's level); an interval
that could not be made says "too few repeats"."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dlrun.report.energy import COLUMNS as ENERGY_COLUMNS, UNREADABLE
from dlrun.report.gather import IDS_PER_ROW, Published, Report
from dlrun.text import for_html, number, percent


def num(value: Any, digits: int = 2) -> str:
    return number(value, digits, missing="-")


def pct(value: Any, digits: int = 1) -> str:
    return percent(value, digits, missing="-")


def interval(low: Any, high: Any, show=num) -> str:
    return "" if low is None or high is None else f" [{show(low)}, {show(high)}]"


def no_interval(how: Any) -> str:
    """What stands where an interval is missing: its reason when that is too few repeats."""
    return " (too few repeats)" if str(how or "").startswith("too few repeats") else ""


def html_table(frame, *, ids: Iterable[str] | None = None, titles: Iterable[str] | None = None,
               raw: Iterable[str] = (), table_id: str = "", caption: str = "") -> str:
    """A DataFrame as an HTML table: cells escaped except the columns in `raw` (links made here), each row
    with its anchor (`ids`) and tooltip (`titles`)."""
    raw = set(raw)
    ids = list(ids) if ids is not None else [""] * len(frame)
    titles = list(titles) if titles is not None else [""] * len(frame)
    out = [f'<table id="{for_html(table_id)}">' if table_id else "<table>"]
    if caption:
        out.append(f"<caption>{for_html(caption)}</caption>")
    # a field name may break after its underscores (image_<wbr>digest), so that a table of many fits the page
    out.append("<thead><tr>" + "".join(f"<th>{for_html(str(c)).replace('_', '_<wbr>')}</th>" for c in frame.columns)
               + "</tr></thead><tbody>")
    for anchor, title, values in zip(ids, titles, frame.itertuples(index=False, name=None)):
        attrs = (f' id="{for_html(anchor)}"' if anchor else "") + (f' title="{for_html(title)}"' if title else "")
        cells = "".join(f"<td>{value}</td>" if column in raw else _cell('' if value is None else str(value))
                        for column, value in zip(frame.columns, values))
        out.append(f"<tr{attrs}>{cells}</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


#: A word longer than this (a digest, a path) may break anywhere, so that its table fits the page; shorter
#: words break only between words.
LONG_WORD = 24


def _cell(text: str) -> str:
    long = any(len(word) > LONG_WORD for word in text.split())
    return f'<td class="long">{for_html(text)}</td>' if long else f"<td>{for_html(text)}</td>"


def quality_mark(row: dict[str, Any]) -> str:
    """A point's verdict as HTML: marked yellow unless ok, its reasons on hover."""
    verdict = str(row.get("quality") or "unknown")
    if verdict == "ok":
        return "ok"
    why = "; ".join(row.get("quality_reasons") or [])
    return f'<span class="q-mark" title="{for_html(why)}">{for_html(verdict)}</span>'


def run_links(run_ids: list[str], listed: set[str]) -> str:
    shown = [f'<a href="#run-{for_html(r)}">{for_html(r)}</a>' if r in listed else for_html(r) for r in run_ids[:IDS_PER_ROW]]
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
                     "nodes": r.get("nodes"), "n": r["n"], "geometric mean": num(r["geomean"]),
                     "95 % CI": interval(r["ci_low"], r["ci_high"]).strip() or no_interval(r["interval"]).strip()
                     or "-",
                     "speedup": num(r["speedup"]) + (interval(r["speedup_low"], r["speedup_high"])
                                                     or no_interval(r["speedup_interval"])),
                     "scaling efficiency": pct(r["scaling_efficiency"])
                     + (interval(r["scaling_efficiency_low"], r["scaling_efficiency_high"], pct)
                        or no_interval(r["speedup_interval"])),
                     "of peak": pct(r.get("of_peak")), "of matmul": pct(r.get("of_matmul")),
                     **_energy(report, report.telemetry.points.get(p.anchor)), "quality": quality_mark(r), "site": ", ".join(p.sites), "image": ", ".join(p.images),
                     "runs": run_links(p.run_ids, listed)})
    frame = pd.DataFrame(rows)
    for column in ("of peak", "of matmul"):
        if (frame[column] == "-").all():
            frame = frame.drop(columns=column)
    unit = f" ({report.unit})" if report.unit else ""
    return html_table(frame, ids=[p.anchor for p in report.points], titles=[p.provenance() for p in report.points],
                      raw=["runs", "quality"], table_id="scaling",
                      caption=f"Throughput{unit} as the geometric mean of n repeats, speedup (the ratio of geometric "
                              "means) and scaling efficiency over the fewest devices of each system, with 95 % "
                              "intervals (t on the logs; Welch's t on the logs for the ratios); the columns of the "
                              "PRACE best-practice guide's Tables 8 and 9, its method only" + _ENERGY_CAPTION
                              * report.telemetry.any)


_ENERGY_CAPTION = ("; energy over the timed window from the runs' telemetry (GPU energy counters or power readings, "
                   "CPU RAPL; what it covers in brackets), the arithmetic mean of the runs with a reading; "
                   f"{UNREADABLE}: the runs recorded telemetry but no energy source could be read where they ran")


def _energy(report: Report, cells: dict[str, str] | None) -> dict[str, str]:
    """The energy columns of a row, where the report has telemetry at all."""
    if not report.telemetry.any:
        return {}
    return dict(cells) if cells else dict.fromkeys(ENERGY_COLUMNS, "-")


def relative_table(report: Report) -> str:
    """Ren et al.'s Table III: workloads and systems down, device counts across, each system / baseline."""
    import pandas as pd

    comparison = report.relative
    assert comparison is not None
    cells = []
    for r in comparison.rows:
        text = pct(r["relative"], 1) + (interval(r.get("relative_low"), r.get("relative_high"), pct)
                                        or no_interval(r.get("interval"))) + f" (n = {r['n']} / {r['baseline_n']})"
        title = (f"{r['system']}: geometric mean {num(r['geomean'])} of {r['n']} run(s) against "
                 f"{comparison.baseline}: {num(r['baseline_geomean'])} of {r['baseline_n']}; "
                 f"runs {', '.join(r['runs'][:IDS_PER_ROW])}")
        mark = "" if r.get("quality") == "ok" else " " + quality_mark(r)
        cells.append({"workload": r["workload"], "model": r["model"], "system": r["system"],
                      "devices": r["devices"], "cell": f'<span title="{for_html(title)}">{for_html(text)}</span>{mark}'})
    for r in comparison.summary_rows:
        cells.append({"workload": "geometric mean", "model": r["model"], "system": r["system"],
                      "devices": r["devices"], "cell": f"<b>{for_html(pct(r['relative'], 1))}</b>"})
    if not cells:
        return "<p>No row has runs at the baseline system.</p>"
    frame = pd.DataFrame(cells)
    table = frame.pivot_table(index=["workload", "model", "system"], columns="devices", values="cell",
                              aggfunc="first", sort=False).fillna("-")
    table.columns = [f"{d} device{'s' if d != 1 else ''}" for d in table.columns]
    table = table.reset_index()
    return html_table(table, raw=[c for c in table.columns if c.endswith(("device", "devices"))], table_id="relative",
                      caption=f"Throughput relative to {comparison.baseline}: the ratio of geometric means with "
                              "its 95 % interval (Welch's t on the logs); bold: the geometric mean of a column's "
                              "ratios; n: repeats here / at the baseline (hover a cell for its runs)")


def fabrics_table(report: Report) -> str:
    """Each fabric against the baseline fabric of its system: change with its interval and Welch's verdict
    (Samsi et al.)."""
    import pandas as pd

    rows = []
    for system, comparison in report.fabrics:
        rows += [{"system": system, "workload": r["workload"], "model": r["model"], "devices": r.get("devices"),
                  "fabric": r["fabric"], "baseline": r["baseline"],
                  "baseline geometric mean": f"{num(r['baseline_geomean'])} (n={r['baseline_n']})",
                  "geometric mean": f"{num(r['geomean'])} (n={r['n']})",
                  "change": f"{r['change_pct']:+.1f} %"
                  + interval(r["change_low_pct"], r["change_high_pct"], lambda v: f"{v:+.1f} %"),
                  "verdict": r["verdict"], "quality": quality_mark(r)} for r in comparison.rows]
        rows += [{"system": system, "workload": "geometric mean", "model": r["model"], "devices": "",
                  "fabric": r["fabric"], "baseline": r["baseline"], "baseline geometric mean": "",
                  "geometric mean": "", "change": f"{r['change_pct']:+.1f} %", "verdict": "",
                  "quality": ""}
                 for r in comparison.summary_rows]
    if not rows:
        return "<p>No row has runs on the baseline fabric.</p>"
    return html_table(pd.DataFrame(rows), table_id="fabrics", raw=["quality"],
                      caption="Fabrics against the baseline fabric of each system: the change is the ratio of "
                              "geometric means less 1, with its 95 % interval and Welch's t-test on the logs per "
                              "row; a row of geometric means of the rows' ratios")


def published_table(report: Report) -> str:
    import pandas as pd

    rows = [{"reference": r.ref_id, "published": r.text, "measured [95 % CI]": measured(r),
             "measured / published": "-" if r.ratio is None else f"{r.ratio:.3f}", "verdict": verdict(r),
             "why": r.why, "points": "; ".join(r.points), "source": f"{r.doc}, {r.where}",
             "quote": f"<q>{for_html(r.quote)}</q>"} for r in report.published]
    return html_table(pd.DataFrame(rows), ids=[r.anchor for r in report.published],
                      titles=[r.provenance() for r in report.published], raw=["quote"], table_id="published",
                      caption="Published numbers of the experiment against the stored points: measured is the "
                              "geometric mean of the runs (a derived quantity: from the ratio of geometric means), "
                              "with its 95 % interval; within: the interval lies inside the tolerance band, "
                              "outside: wholly outside it, else inconclusive (drawn as open diamonds where they "
                              "name one throughput of one configuration)")


def measured(row: Published) -> str:
    if row.measured is None:
        return "-"
    if row.interval.startswith("exact"):
        return f"{row.measured:,.0f} (counted)"
    return num(row.measured) + (interval(*row.ci) if row.ci else no_interval(row.interval)) + f" (n={row.runs})"


def verdict(row: Published) -> str:
    if row.verdict == "inconclusive" and row.repeats_needed:
        return f"inconclusive: about {row.repeats_needed} repeats per point would decide"
    return row.verdict


#: Model facts (Table II): metric -> the column group it is shown under.
FACTS = {"params": "parameters", "forward_macs": "multiply-adds per instance"}


def model_facts_table(report: Report) -> str:
    """Ren et al.'s Table II: one row per model, counted against published parameters and operations, each
    with its verdict; empty when the experiment has no counted facts."""
    import pandas as pd

    facts = [r for r in report.published if r.metric in FACTS]
    if not facts:
        return ""
    rows: dict[str, dict[str, str]] = {}
    for r in facts:
        row = rows.setdefault(r.subject or r.ref_id, {"model": r.subject or r.ref_id})
        name = FACTS[r.metric]
        row[f"{name}: counted"] = "-" if r.measured is None else f"{r.measured:,.0f}"
        row[f"{name}: published"] = r.text
        row[f"{name}: verdict"] = f'<a href="#{for_html(r.anchor)}">{for_html(verdict(r))}</a>'
    frame = pd.DataFrame(list(rows.values())).fillna("-")
    return html_table(frame, raw=[c for c in frame.columns if c.endswith(": verdict")], table_id="model-facts",
                      caption="Counted on dlrun's own model definitions against the published parameters and "
                              "operations (a count is exact: within or outside the published number's tolerance; "
                              "each verdict links to its row with the quote)")


RUN_COLUMNS = ["id", "created_at", "status", "workload", "model", "system", "site", "origin", "image",
               "image_digest", "world_size", "nodes", "fabric", "precision", "batch_size", "experiment", "point"]


def runs_table(report: Report) -> str:
    import pandas as pd

    frame = pd.DataFrame(report.runs, columns=[*RUN_COLUMNS, "value", "unit"])
    frame["value"] = [("-" if v is None else f"{v:.4g} {u}") for v, u in zip(frame["value"], frame["unit"])]
    frame = frame.drop(columns="unit").astype(object).where(frame.notna(), "")
    if report.telemetry.any:
        for column in ENERGY_COLUMNS:
            frame[column] = [_energy(report, report.telemetry.runs.get(r["id"]))[column] for r in report.runs]
    titles = [f"run {r['id']}: {r['workload']} on {r['system']} at site {r['site']}, image {r['image']} "
              f"{r['image_digest'] or ''}" for r in report.runs]
    return html_table(frame, ids=[f"run-{r['id']}" for r in report.runs], titles=titles, table_id="runs",
                      caption=f"The newest {len(report.runs)} of {report.runs_total} selected runs "
                              "(dlrun results show RUN_ID for everything stored about one)")
