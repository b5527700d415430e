"""The report page: one HTML file with its style inline, no script and nothing fetched; the PNG plots sit
beside it in the same folder and are referenced by relative name, each with an image map whose areas link
every point to its table row and show its provenance on hover."""
from __future__ import annotations

import time

from dlrun import __version__
from dlrun.report.energy import MAX_TRACES
from dlrun.report.gather import Report
from dlrun.report.plots import PAGE_WIDTH_PX, Plot
from dlrun.report.tables import (fabrics_table, model_facts_table, published_table, relative_table, runs_table,
                                 scaling_table)
from dlrun.results.compare.stats import MIN_REPEATS
from dlrun.text import for_html

STYLE = """
body { font-family: "DejaVu Sans", sans-serif; margin: 1.5em; color: #222; max-width: %dpx; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.85em; max-width: 100%%; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; vertical-align: top; }
td.long { overflow-wrap: anywhere; }
th { background: #eee; } caption { text-align: left; font-style: italic; padding: 0.3em 0; }
tr:target { background: #fff3b0; } tr:hover { background: #f3f7ff; }
.mismatch { border: 2px solid #b00; background: #fff0f0; padding: 0.6em 1em; margin: 1em 0; }
.mismatch h2 { color: #b00; border: none; margin: 0; }
.like { border: 2px solid #070; background: #f0fff0; padding: 0.4em 1em; margin: 1em 0; }
.quality { border: 2px solid #b80; background: #fffbe6; padding: 0.4em 1em; margin: 1em 0; }
.holds { font-size: 0.85em; color: #333; } .q-mark { background: #ffd43b; padding: 0 0.3em; border-radius: 3px; }
.notes { color: #555; font-size: 0.85em; } figure { margin: 1em 0; } figcaption { font-size: 0.85em; color: #555; }
q { font-style: italic; }
"""  % PAGE_WIDTH_PX

STATISTICS = (f"Every throughput is the geometric mean of its repeats, with the 95 % t interval of the mean of "
              f"their logarithms (never below zero; none below {MIN_REPEATS} repeats: \u201ctoo few repeats\u201d). "
              "Speedups, relative throughputs and changes are ratios of geometric means, with Welch's t interval "
              "on the difference of the mean logarithms, the same computation as the test of a change. A "
              "published number is matched <i>within</i> only when the interval lies inside its tolerance band, "
              "<i>outside</i> only when it lies wholly outside, else the verdict is <i>inconclusive</i>. Averages "
              "over rows are geometric means of the rows' ratios.")


def _plot(plot: Plot) -> str:
    name = f"map-{plot.file.removesuffix('.png')}"
    areas = "\n".join(f'<area shape="{a.shape}" coords="{",".join(map(str, a.coords))}" href="{for_html(a.href)}" '
                      f'title="{for_html(a.title)}" alt="{for_html(a.title)}">' for a in plot.areas)
    notes = "".join(f" {for_html(n)}." for n in plot.notes)
    if plot.sources:
        notes += f" Open diamonds: published numbers, labelled with their source ({for_html('; '.join(plot.sources))})."
    return (f'<figure id="figure-{for_html(name[4:])}"><img src="{for_html(plot.file)}" width="{plot.width}" '
            f'height="{plot.height}" alt="{for_html(plot.alt)}" usemap="#{name}">\n<map name="{name}">\n{areas}\n</map>\n'
            f'<figcaption>{for_html(plot.title)}: click a point for its row (<a href="#{for_html(plot.table)}">table'
            f'</a>), hover it for its runs.{notes}</figcaption></figure>')


def _mismatch(report: Report) -> str:
    """The banner: whether the tables are like-for-like (and if not, every differing key field), which sites and
    machines each table holds, and how many runs are not ok."""
    holds = ('<ul class="holds">' + "".join(f"<li>{for_html(line)}</li>" for line in report.holds) + "</ul>"
             if report.holds else "")
    if report.like_for_like:
        banner = ('<div class="like" id="like-for-like">Like-for-like: within each table the runs differ only in '
                  f"what the table compares (site and machine included).{holds}</div>")
    else:
        items = "".join(f"<li>{for_html(line)}</li>" for line in report.differences)
        banner = ('<div class="mismatch" id="not-like-for-like"><h2>Not like-for-like</h2><p>These runs differ in '
                  "more than what the tables compare; they are shown anyway, and a difference below may explain a "
                  f"difference in the numbers:</p><ul>{items}</ul>{holds}</div>")
    return banner + _quality(report)


def _quality(report: Report) -> str:
    from dlrun.results.quality import not_ok_sentence

    if not report.quality:
        return ""
    if set(report.quality) == {"ok"}:
        return f'<p id="quality">Quality: {for_html(not_ok_sentence(report.quality))}.</p>'
    return (f'<div class="quality" id="quality"><b>Quality</b>: {for_html(not_ok_sentence(report.quality))}. Points '
            'whose runs are not all ok are marked <span class="q-mark">so</span> beside their numbers (hover for '
            "why); an implausible point is left out of the verdicts against published numbers.</div>")


def _experiments(report: Report) -> str:
    out = []
    for spec in report.experiments:
        out += [f'<h2 id="experiment-{for_html(spec.id)}">Experiment {for_html(spec.id)}</h2>',
                f"<p><b>{for_html(spec.title)}</b>. {for_html(spec.document.name)}: <i>{for_html(spec.document.title)}</i>, "
                f"{for_html(spec.where)}.</p><p>{for_html(spec.description)}</p>"]
        if not spec.references:
            out.append("<p>The experiment has no published numbers.</p>")
    facts = model_facts_table(report)
    if facts:
        out.append(facts)
    if report.published:
        out.append(published_table(report))
    elif report.experiments:
        out.append("<p>No published number of the experiment reads a point of its systems.</p>")
    if report.findings:
        out.append("<p>Findings (qualitative references):</p><ul>" + "".join(
            f'<li id="{for_html(f["anchor"])}"><b>{for_html(f["id"])}</b> ({for_html(f["doc"])}, {for_html(f["where"])}): '
            f'<q>{for_html(f["quote"])}</q></li>' for f in report.findings) + "</ul>")
    return "\n".join(out)


def render_tables(report: Report) -> dict[str, str]:
    """The page's tables as HTML (pandas), by section; drawn while the plots are."""
    out = {"experiments": _experiments(report), "runs": runs_table(report)}
    if report.points:
        out["scaling"] = scaling_table(report)
    if report.relative is not None:
        out["relative"] = relative_table(report)
    if report.fabrics:
        out["fabrics"] = fabrics_table(report)
    return out


def _split(plots: list[Plot]) -> tuple[list[Plot], list[Plot]]:
    """(the scaling and bar plots, the telemetry and per-rank figures)."""
    figures = [plot for plot in plots if plot.file.startswith(("telemetry-", "ranks-"))]
    return [plot for plot in plots if plot not in figures], figures


def _telemetry(figures: list[Plot]) -> list[str]:
    ranks = [plot for plot in figures if plot.file.startswith("ranks-")]
    telemetry = [plot for plot in figures if plot not in ranks]
    out = ['<h2 id="telemetry">Telemetry: power and utilisation over time per device</h2>',
           f'<p class="notes">Per point, its newest run whose series is on this machine (the first {MAX_TRACES} '
           "points; the energy columns of the tables hold every run). Click a figure for its point's row.</p>",
           *(_plot(plot) for plot in telemetry)] if telemetry else []
    return out + (['<h2 id="ranks">Per-rank step times</h2>',
                   '<p class="notes">Per point, its newest run of several ranks: each rank\'s median time until it '
                   "was ready to communicate and its median wait for the all-reduce, its median and 95th-percentile "
                   "step (a rank the others waited for, beyond the straggler threshold, in red). Click a figure for "
                   "its point's row.</p>", *(_plot(plot) for plot in ranks)] if ranks else [])


def points_heading(report: Report) -> str:
    """The measured points' heading: what the table holds, not a document it reproduces (an experiment's own
    published numbers have their section; the table's caption says whose layout it follows)."""
    lines = {}
    for point in report.points:
        lines.setdefault((point.series, point.line), set()).add(point.devices)
    if any(len(devices) > 1 for devices in lines.values()):
        return "Scaling: throughput, speedup and efficiency over each system's fewest devices"
    return "Measured points: throughput per configuration"


def render(report: Report, plots: list[Plot], store: str, tables: dict[str, str]) -> str:
    """The page around `plots` and `tables` (render_tables)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    # every reported run is counted in `quality` (a point lists only its newest runs where it has many)
    measured = (f"{sum(report.quality.values())} successful result(s) in "
                f"{len(report.points)} point(s) on {len(report.scaling)} line(s)" if report.points
                else "no measured point: counted facts only")
    sections = [f"<h1>{for_html(report.title)}</h1>",
                f"<p>Selection: <code>{for_html(report.selection or 'every stored run')}</code>; "
                f"{report.runs_total} run(s) selected, {measured}.</p>"]
    if report.points or any(not row.interval.startswith("exact") for row in report.published):
        sections += [_mismatch(report), f'<p class="notes" id="statistics">{STATISTICS}</p>']
    sections.append(tables["experiments"])
    plots, telemetry = _split(plots)
    if report.points:
        sections += ['<h2 id="plots">Plots</h2>', *(_plot(plot) for plot in plots)]
        if not plots:
            sections.append("<p>Nothing to plot: no point has a device count.</p>")
        sections += [f'<h2 id="points">{points_heading(report)}</h2>', tables["scaling"]]
    if report.relative is not None:
        sections += ['<h2 id="relative-systems">Systems relative to the baseline (Ren et al. Table III)</h2>',
                     tables["relative"]]
    if report.fabrics:
        sections += ['<h2 id="fabrics-against-baseline">Fabrics (Samsi et al.)</h2>', tables["fabrics"]]
    sections += _telemetry(telemetry)
    if report.notes:
        sections.append('<div class="notes"><p>Notes:</p><ul>'
                        + "".join(f"<li>{for_html(n)}</li>" for n in report.notes) + "</ul></div>")
    sections += ['<h2 id="provenance">Runs</h2>', tables["runs"],
                 f'<p class="notes">Written by dlrun {for_html(__version__)} on {stamp} from the result store '
                 f"{for_html(store)}. The page and its plots are self-contained: nothing is fetched.</p>"]
    body = "\n".join(s for s in sections if s)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="generator" content="dlrun {for_html(__version__)} report">\n'
            f"<title>{for_html(report.title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n")
