"""The report's PNG plots (matplotlib's Agg canvas, no display, no pyplot state), each with the pixel
areas of its points so that the page can link every point to its provenance row (an HTML image map).

scaling.png   throughput against devices on log-log axes, a line per system (per system and fabric where a
              system has several) through the geometric means, their 95 % intervals as error bars, each
              repeat as a small dot beside its mean, the ideal-scaling line from each line's fewest devices,
              and the published numbers as open diamonds labelled with their source (Ren et al., Fig. 4); an
              implausible point (compare's verdict) is a red cross off its line, with its efficiency
bars.png      the geometric mean per configuration (device count; and system, with several fabrics) as a bar
              with its 95 % interval and the repeats as dots, a colour per fabric when the runs used several
              fabrics, else per system (Samsi et al., Fig. 4); an implausible point's bar hatched in red

Intervals are those of the logs (dlrun.results.compare.stats), so no bar or whisker reaches below zero; a point of
fewer than three repeats has no whisker. Both plots are as wide as the page's content (PAGE_WIDTH_PX), drawn
at the size the page shows them, so that the image maps' pixel areas stay where the points are.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlrun.report.gather import Point, Published, Report, series_of
from dlrun.text import for_plot

DPI = 100
#: The width of the page's content (page.STYLE sets the same), which every plot fills.
PAGE_WIDTH_PX = 1200
#: Series (workload, model) drawn; the tables hold them all.
MAX_SERIES = 6
#: Bars drawn; the tables hold them all.
MAX_BARS = 48
#: Repeats drawn per point: all up to this many, else this many evenly spaced in value order (min and max
#: included); the tables count them all.
MAX_DOTS = 60
#: A point's quality verdict that keeps it off its line (dlrun.results.quality), and how it is drawn instead.
IMPLAUSIBLE = "implausible"
IMPLAUSIBLE_COLOUR = (0.8, 0.0, 0.0)


@dataclass
class Area:
    shape: str                 # circle | rect
    coords: list[int]
    href: str
    title: str


@dataclass
class Plot:
    file: str
    title: str
    width: int
    height: int
    alt: str
    table: str                 # the anchor of the table the plot is read with
    areas: list[Area] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    y_range: tuple[float, float] = (0.0, 0.0)   # the value axis as drawn (its unit: the report's)
    sources: list[str] = field(default_factory=list)  # the labels of published points: document, table/figure


def warm() -> None:
    """Import what drawing needs and load the font, so that draw() starts at once (the report's plotting
    process does this while its parent reads the store)."""
    from matplotlib.ticker import FuncFormatter, LogLocator  # noqa: F401

    fig = _figure(1, 1)
    fig.text(0.5, 0.5, "0123456789 devices").get_window_extent(fig.canvas.get_renderer())


def draw(report: Report, folder: Path) -> list[Plot]:
    """The report's plots written into `folder`: scaling.png and bars.png, where there is something to draw."""
    return [plot for plot in (scaling_plot(report, folder), bars_plot(report, folder)) if plot]


def _figure(width_in: float, height_in: float):
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    matplotlib.rcParams["text.parse_math"] = False  # every text made from now on is drawn as written (_as_text)
    fig = Figure(figsize=(width_in, height_in), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _pixel(ax, x: float, y: float, height: float) -> tuple[int, int] | None:
    """Where (x, y) is drawn, in the image's pixels from its top left; None where it has no place (a value
    the axes cannot show: that point keeps its row in the tables, without a link on the image)."""
    px, py = ax.transData.transform((x, y))
    if not (math.isfinite(px) and math.isfinite(py)):
        return None
    return int(round(px)), int(round(height - py))


def _areas(placed: list[tuple[Any, float, float, str, str]], height: float) -> list[Area]:
    """The image map's circles of the points placed (axes, x, y, anchor, title), those the axes can show."""
    pixels = [(_pixel(ax, x, y, height), anchor, title) for ax, x, y, anchor, title in placed]
    return [Area("circle", [*at, 7], f"#{anchor}", title) for at, anchor, title in pixels if at]


def _label(series: tuple) -> str:
    workload, model = series
    return str(workload) if model in (workload, None, "n/a") else f"{workload} ({model})"


def _whisker(row: dict[str, Any]) -> tuple[float, float]:
    """The lengths below and above the geometric mean to its interval's ends (positive: on the logs), or
    none (fewer than three repeats)."""
    low, high, centre = row.get("ci_low"), row.get("ci_high"), row["geomean"]
    return (0.0, 0.0) if low is None or high is None else (centre - low, high - centre)


def _dots(values: list[float]) -> list[float]:
    """The repeats to draw: all, or MAX_DOTS of them evenly spaced in value order."""
    if len(values) <= MAX_DOTS:
        return list(values)
    step = (len(values) - 1) / (MAX_DOTS - 1)
    return [values[round(i * step)] for i in range(MAX_DOTS)]


def _spread(count: int, centre: float, width: float) -> list[float]:
    """`count` positions evenly over [centre - width / 2, centre + width / 2] (deterministic jitter)."""
    if count == 1:
        return [centre]
    return [centre - width / 2 + width * i / (count - 1) for i in range(count)]


def _source(ref: Published) -> str:
    return f"{ref.doc}, {ref.where}" if ref.where else ref.doc


def scaling_plot(report: Report, folder: Path) -> Plot | None:
    series = series_of(report)
    numeric = [p for p in report.points if isinstance(p.devices, int)]
    if not numeric:
        return None
    shown = series[:MAX_SERIES]
    cols = 1 if len(shown) == 1 else 2
    rows = math.ceil(len(shown) / cols)
    width, height = PAGE_WIDTH_PX / DPI, (5.0 if cols == 1 else 4.4) * rows  # inches
    fig = _figure(width, height)
    colours = _colours(sorted({p.line for p in numeric}))
    placed: list[tuple[Any, float, float, str, str]] = []
    sources: list[str] = []
    for index, one in enumerate(shown):
        ax = fig.add_subplot(rows, cols, index + 1)
        mine = [p for p in numeric if p.series == one]
        published = [r for r in report.published if r.series == one and r.value and isinstance(r.devices, int)]
        sources += _scaling_axes(ax, mine, published, colours, report.unit)
        ax.set_title(_label(one), fontsize=10)
        placed += [(ax, p.devices, p.row["geomean"], p.anchor, p.provenance()) for p in mine]
        placed += [(ax, r.devices, r.value, r.anchor, r.provenance()) for r in published]
    fig.suptitle("throughput against devices (log-log): geometric mean of the repeats (dots) with its 95 % "
                 "interval; dashed: ideal scaling", fontsize=11)
    # fixed margins (in inches, as fractions of the figure): tight_layout would draw the figure once more only
    # to measure it
    fig.subplots_adjust(left=0.85 / width, right=1 - 0.2 / width, bottom=0.6 / height, top=1 - 0.75 / height,
                        wspace=0.2, hspace=0.45)
    low = min(ax.get_ylim()[0] for ax in fig.axes)
    plot = _save(fig, folder, "scaling.png", "scaling", "Throughput against devices, log-log, with ideal scaling")
    plot.y_range = (low, max(ax.get_ylim()[1] for ax in fig.axes))
    plot.sources = list(dict.fromkeys(sources))
    plot.areas = _areas(placed, plot.height)
    if len(series) > len(shown):
        plot.notes.append(f"{len(series) - len(shown)} more series are in the tables only")
    return plot


def _scaling_axes(ax, points: list[Point], published: list[Published], colours: dict[str, Any],
                  unit: str | None) -> list[str]:
    """Draw one series; the labels of its published points (their sources)."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    devices = sorted({p.devices for p in points} | {r.devices for r in published})
    _implausible(ax, [p for p in points if p.row.get("quality") == IMPLAUSIBLE])
    for line in sorted({p.line for p in points}):
        mine = sorted((p for p in points if p.line == line and p.row.get("quality") != IMPLAUSIBLE),
                      key=lambda p: p.devices)
        if mine:
            _scaling_line(ax, mine, colours[line], line)
    labels = _published(ax, published)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    _log_limits(ax)
    # plain tick labels at 1-2-5 steps: matplotlib's log labels are mathtext ($10^{3}$), whose parser alone
    # costs 0.2 s to build, a tenth of the report's time
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax.set_xticks(devices)
    ax.set_xticklabels([str(d) for d in devices])
    ax.minorticks_off()
    ax.set_xlabel("devices")
    ax.set_ylabel(unit or "throughput")
    ax.grid(True, which="major", linestyle=":", linewidth=0.6)
    ax.legend(fontsize=8)
    return labels


def _log_limits(ax) -> None:
    """Limits set from the data drawn, a margin each side on the log axes, never left to autoscaling: one point
    alone (one run on one device count) gave autoscaling equal limits, which on log axes it did not always
    widen (a singular transform: every point's pixel position NaN)."""
    (x0, y0), (x1, y1) = ax.dataLim.get_points()
    if all(math.isfinite(v) and v > 0 for v in (x0, x1)):
        ax.set_xlim(x0 / 2 ** 0.35, x1 * 2 ** 0.35)
    if all(math.isfinite(v) and v > 0 for v in (y0, y1)):
        ax.set_ylim(y0 / 1.3, y1 * 1.3)


def _scaling_line(ax, mine: list[Point], colour: Any, line: str) -> None:
    """One line's points in device order: means with whiskers, the repeats beside them, ideal scaling."""
    xs, ys = [p.devices for p in mine], [p.row["geomean"] for p in mine]
    whiskers = [_whisker(p.row) for p in mine]
    ax.errorbar(xs, ys, yerr=[[w[0] for w in whiskers], [w[1] for w in whiskers]], marker="o", capsize=3,
                color=colour, label=line, zorder=3)
    for p in mine:  # the repeats, just right of their mean (a factor on the log2 axis)
        dots = _dots(p.values)
        ax.scatter([p.devices * 2 ** x for x in _spread(len(dots), 0.12, 0.1)], dots, s=9,
                   color=colour, alpha=0.6, linewidths=0, zorder=2)
    if len(xs) > 1:
        ideal = [ys[0] * x / xs[0] for x in xs]
        ax.plot(xs, ideal, linestyle="--", linewidth=1, color=colour, alpha=0.7)


def _implausible(ax, points: list[Point]) -> None:
    """Implausible points (dlrun.results.compare.verdicts: a scaling efficiency no hardware reaches) apart from
    the lines and their ideal scaling: a red cross each with its efficiency beside it (its repeats are in the tables)."""
    if not points:
        return
    ax.plot([p.devices for p in points], [p.row["geomean"] for p in points], linestyle="none", marker="X",
            markersize=11, color=IMPLAUSIBLE_COLOUR, label="implausible (off the line)", zorder=5)
    for p in points:
        efficiency = p.row.get("scaling_efficiency")
        said = f"implausible: {100 * efficiency:.0f} %" if isinstance(efficiency, (int, float)) else "implausible"
        ax.annotate(said, (p.devices, p.row["geomean"]), xytext=(-9, -3), textcoords="offset points", ha="right",
                    va="top", fontsize=7, color=IMPLAUSIBLE_COLOUR, parse_math=False)


def _published(ax, published: list[Published]) -> list[str]:
    """Published numbers as open diamonds, each labelled with its source; the labels."""
    if not published:
        return []
    ax.plot([r.devices for r in published], [r.value for r in published], linestyle="none", marker="D",
            markersize=8, markerfacecolor="none", markeredgecolor="black", label="published", zorder=4)
    for ref in published:
        # parse_math off: a source's text is data, never mathtext markup
        ax.annotate(_source(ref), (ref.devices, ref.value), xytext=(7, 5), textcoords="offset points", fontsize=7,
                    color="black", parse_math=False)
    return [_source(ref) for ref in published]


def _plain(value: float, _position: Any = None) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.3g}"


def bars_plot(report: Report, folder: Path) -> Plot | None:
    """Bars of geometric means from zero, their intervals, and the repeats as dots over each bar."""
    by_fabric = bool(report.fabrics)
    bars = _bar_categories(report.points, by_fabric)
    hues = sorted({hue for row in bars.values() for hue in row})
    categories = list(bars)[: max(MAX_BARS // max(len(hues), 1), 1)]
    if not categories:
        return None
    width = PAGE_WIDTH_PX / DPI
    fig = _figure(width, 4.6)
    ax = fig.add_subplot(1, 1, 1)
    colours = _colours(hues)
    step = 0.8 / len(hues)
    placed = []
    for k, hue in enumerate(hues):
        at = [(c - 0.4 + step * (k + 0.5), bars[category][hue]) for c, category in enumerate(categories)
              if hue in bars[category]]
        placed += _bars(ax, at, step, colours[hue], hue)
    ax.set_xticks(range(len(categories)))
    rotated = len(categories) > 4
    ax.set_xticklabels([_category(c, len({c[0] for c in categories}) > 1) for c in categories],
                       rotation=30 if rotated else 0, ha="right" if rotated else "center", fontsize=8)
    ax.set_ylabel(report.unit or "throughput")
    ax.legend(title="fabric" if by_fabric else "system", fontsize=8)
    ax.grid(True, axis="y", linestyle=":", linewidth=0.6)
    hue = "fabric" if by_fabric else "system"
    ax.set_xlabel(f"{'system / ' if by_fabric else ''}devices")
    ax.set_title(f"geometric mean throughput per device count{', system' if by_fabric else ''} and {hue} (a colour "
                 f"per {hue}) with its 95 % interval; dots: the repeats", fontsize=11)
    fig.subplots_adjust(left=0.85 / width, right=1 - 0.2 / width, top=0.92, bottom=0.3 if rotated else 0.16)
    y_range = ax.get_ylim()
    plot = _save(fig, folder, "bars.png", "scaling",
                 f"Geometric mean throughput per device count and {hue}, with the repeats")
    plot.y_range = y_range
    plot.areas = [_bar_area(patch, point, plot.height) for patch, point in placed]
    left = len(bars) - len(categories)
    if left:
        plot.notes.append(f"{left} more configurations are in the tables only")
    return plot


def _bar_categories(points: list[Point], by_fabric: bool) -> dict[tuple, dict[str, Point]]:
    """category (series, system and devices; or series and devices) -> hue (fabric, or line) -> point."""
    bars: dict[tuple, dict[str, Point]] = {}
    for p in points:
        category = (p.series, p.system, p.devices) if by_fabric else (p.series, p.devices)
        bars.setdefault(category, {}).setdefault(p.fabric if by_fabric else p.line, p)
    return bars


def _bars(ax, at: list[tuple[float, Point]], step: float, colour: Any, label: str) -> list[tuple[Any, Point]]:
    """One hue's bars (geometric means from zero, their whiskers) at their x positions, the repeats as dots
    over each; each bar's patch with its point."""
    whiskers = [_whisker(point.row) for _, point in at]
    drawn = ax.bar([x for x, _ in at], [point.row["geomean"] for _, point in at], width=step * 0.95, color=colour,
                   label=label, alpha=0.75, yerr=[[w[0] for w in whiskers], [w[1] for w in whiskers]], capsize=2)
    for patch, (x, point) in zip(drawn.patches, at):
        dots = _dots(point.values)
        ax.scatter(_spread(len(dots), x, step * 0.5), dots, s=7, color="black", alpha=0.55, linewidths=0, zorder=3)
        if point.row.get("quality") == IMPLAUSIBLE:  # hatched in red and said so: no result to read off
            patch.set(hatch="xx", edgecolor=IMPLAUSIBLE_COLOUR, facecolor="none")
            ax.annotate("implausible", (x, point.row["geomean"]), xytext=(0, 4), textcoords="offset points",
                        ha="center", fontsize=7, color=IMPLAUSIBLE_COLOUR, parse_math=False)
    return list(zip(drawn.patches, [point for _, point in at]))


def _bar_area(patch, point: Point, height: int) -> Area:
    """The image-map rectangle of a bar, in the PNG's pixels (y downwards)."""
    box = patch.get_window_extent()
    return Area("rect", [int(box.x0), int(height - box.y1), int(math.ceil(box.x1)), int(math.ceil(height - box.y0))],
                f"#{point.anchor}", point.provenance())


def _category(category: tuple, label_series: bool) -> str:
    series, *rest = category
    return " / ".join([*([_label(series)] if label_series else []), *(f"{v} dev" if i == len(rest) - 1 else str(v) for i, v in enumerate(rest))])


def _colours(names: list[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return {name: cmap(i % 10) for i, name in enumerate(names)}


def _as_text(fig) -> None:
    """Every text of the figure (titles, axis labels, ticks, legends, annotations; names from the store among
    them) as `dlrun.text.for_plot` gives it, drawn without mathtext: a label is data, never control
    characters or `$...$` markup."""
    from matplotlib.text import Text

    for ax in fig.axes:  # tick labels are made again from their formatters when the figure is drawn
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(_plain_formatter(axis.get_major_formatter()))
            axis.set_minor_formatter(_plain_formatter(axis.get_minor_formatter()))
    for text in fig.findobj(Text):
        text.set_text(for_plot(text.get_text()))
        text.set_parse_math(False)


def _plain_formatter(inner):
    """A tick formatter whose labels are `inner`'s through for_plot (its locations and offset kept)."""
    from matplotlib.ticker import Formatter

    class PlainFormatter(Formatter):
        def __call__(self, x, pos=None):
            return for_plot(inner(x, pos))

        def set_locs(self, locs):
            inner.set_locs(locs)

        def get_offset(self):
            return for_plot(inner.get_offset())

    return PlainFormatter()


def _save(fig, folder: Path, name: str, table: str, alt: str) -> Plot:
    import warnings

    _as_text(fig)
    with warnings.catch_warnings():  # a printable character the font lacks is drawn as a box, not a warning
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from")
        fig.savefig(folder / name, dpi=DPI)
    width, height = (int(round(v)) for v in fig.get_size_inches() * DPI)
    return Plot(name, alt, width, height, alt, table)
