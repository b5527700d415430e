"""The report's PNG plots (matplotlib's Agg canvas, no display, no pyplot state), each with the pixel
areas of its points so that the page can link every point to its provenance row (an HTML image map).

scaling.png   throughput against devices on log-log axes, a line per system (per system and fabric where a
              system has several), the ideal-scaling line from each line's fewest devices, the 95 % intervals
              as error bars and the published numbers as open diamonds (Ren et al., Fig. 4)
bars.png      mean throughput per configuration as bars with their 95 % intervals, a colour per fabric
              when the runs used several fabrics, else per system (Samsi et al., Fig. 4)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlrun.report.gather import Point, Published, Report, series_of

DPI = 100
#: Series (workload, model) drawn; the tables hold them all.
MAX_SERIES = 6
#: Bars drawn; the tables hold them all.
MAX_BARS = 48


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
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _pixel(ax, x: float, y: float, height: float) -> tuple[int, int]:
    px, py = ax.transData.transform((x, y))
    return int(round(px)), int(round(height - py))


def _label(series: tuple) -> str:
    workload, model = series
    return str(workload) if model in (workload, None, "n/a") else f"{workload} ({model})"


def _interval(row: dict[str, Any], mean: float) -> tuple[float, float]:
    low, high = row.get("ci_low"), row.get("ci_high")
    return (0.0, 0.0) if low is None or high is None else (max(mean - low, 0.0), max(high - mean, 0.0))


def scaling_plot(report: Report, folder: Path) -> Plot | None:
    series = series_of(report)
    numeric = [p for p in report.points if isinstance(p.devices, int) and p.row["geomean"] > 0]
    if not numeric:
        return None
    shown = series[:MAX_SERIES]
    cols = 1 if len(shown) == 1 else 2
    rows = math.ceil(len(shown) / cols)
    fig = _figure(6.4 * cols, 4.4 * rows)
    colours = _colours(sorted({p.line for p in numeric}))
    placed: list[tuple[Any, float, float, str, str]] = []
    for index, one in enumerate(shown):
        ax = fig.add_subplot(rows, cols, index + 1)
        mine = [p for p in numeric if p.series == one]
        published = [r for r in report.published if r.series == one and r.value and isinstance(r.devices, int)]
        _scaling_axes(ax, mine, published, colours, report.unit)
        ax.set_title(_label(one), fontsize=10)
        placed += [(ax, p.devices, p.row["geomean"], p.anchor, p.provenance()) for p in mine]
        placed += [(ax, r.devices, r.value, r.anchor, r.provenance()) for r in published]
    fig.suptitle("throughput against devices (log-log); dashed: ideal scaling", fontsize=11)
    # fixed margins: tight_layout would draw the figure once more only to measure it
    width, height = 6.4 * cols, 4.4 * rows  # margins in inches, as fractions of the figure
    fig.subplots_adjust(left=0.85 / width, right=1 - 0.2 / width, bottom=0.6 / height, top=1 - 0.75 / height,
                        wspace=0.25, hspace=0.45)
    plot = _save(fig, folder, "scaling.png", "scaling", "Throughput against devices, log-log, with ideal scaling")
    plot.areas = [Area("circle", [*_pixel(ax, x, y, plot.height), 7], f"#{anchor}", title)
                  for ax, x, y, anchor, title in placed]
    if len(series) > len(shown):
        plot.notes.append(f"{len(series) - len(shown)} more series are in the tables only")
    return plot


def _scaling_axes(ax, points: list[Point], published: list[Published], colours: dict[str, Any],
                  unit: str | None) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator

    devices = sorted({p.devices for p in points} | {r.devices for r in published})
    for line in sorted({p.line for p in points}):
        mine = sorted((p for p in points if p.line == line), key=lambda p: p.devices)
        xs, ys = [p.devices for p in mine], [p.row["geomean"] for p in mine]
        errors = [_interval(p.row, p.row["geomean"]) for p in mine]
        ax.errorbar(xs, ys, yerr=[[e[0] for e in errors], [e[1] for e in errors]], marker="o", capsize=3,
                    color=colours[line], label=line)
        if len(xs) > 1:
            ideal = [ys[0] * x / xs[0] for x in xs]
            ax.plot(xs, ideal, linestyle="--", linewidth=1, color=colours[line], alpha=0.7)
    if published:
        ax.plot([r.devices for r in published], [r.value for r in published], linestyle="none", marker="D",
                markersize=8, markerfacecolor="none", markeredgecolor="black", label="published")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
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


def _plain(value: float, _position: Any = None) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.3g}"


def bars_plot(report: Report, folder: Path) -> Plot | None:
    by_fabric = bool(report.fabrics)
    bars: dict[tuple, dict[str, Point]] = {}
    for p in report.points:
        category = (p.series, p.system, p.devices) if by_fabric else (p.series, p.devices)
        bars.setdefault(category, {}).setdefault(p.fabric if by_fabric else p.line, p)
    hues = sorted({hue for row in bars.values() for hue in row})
    categories = list(bars)[: max(MAX_BARS // max(len(hues), 1), 1)]
    if not categories:
        return None
    width = min(max(6.4, 0.5 * len(categories) * len(hues) + 2), 12.8)  # at most 1280 pixels: no scaling
    fig = _figure(width, 4.6)
    ax = fig.add_subplot(1, 1, 1)
    colours = _colours(hues)
    step = 0.8 / len(hues)
    placed = []
    for k, hue in enumerate(hues):
        xs, ys, errs, mine = [], [], [], []
        for c, category in enumerate(categories):
            point = bars[category].get(hue)
            if point is None:
                continue
            xs.append(c - 0.4 + step * (k + 0.5))
            ys.append(point.row["geomean"])
            errs.append(_interval(point.row, point.row["geomean"]))
            mine.append(point)
        drawn = ax.bar(xs, ys, width=step * 0.95, color=colours[hue], label=hue,
                       yerr=[[e[0] for e in errs], [e[1] for e in errs]], capsize=2)
        placed += list(zip(drawn.patches, mine))
    ax.set_xticks(range(len(categories)))
    rotated = len(categories) > 4
    ax.set_xticklabels([_category(c, len({c[0] for c in categories}) > 1) for c in categories],
                       rotation=30 if rotated else 0, ha="right" if rotated else "center", fontsize=8)
    ax.set_ylabel(report.unit or "throughput")
    ax.legend(title="fabric" if by_fabric else "system", fontsize=8)
    ax.grid(True, axis="y", linestyle=":", linewidth=0.6)
    ax.set_title(f"mean throughput per {'fabric' if by_fabric else 'system'}, 95 % intervals", fontsize=11)
    fig.subplots_adjust(left=0.85 / width, right=1 - 0.2 / width, top=0.92, bottom=0.25 if rotated else 0.12)
    plot = _save(fig, folder, "bars.png", "scaling", f"Mean throughput per {'fabric' if by_fabric else 'system'}")
    for patch, point in placed:
        box = patch.get_window_extent()
        plot.areas.append(Area("rect", [int(box.x0), int(plot.height - box.y1), int(math.ceil(box.x1)),
                                        int(math.ceil(plot.height - box.y0))], f"#{point.anchor}", point.provenance()))
    left = len(bars) - len(categories)
    if left:
        plot.notes.append(f"{left} more configurations are in the tables only")
    return plot


def _category(category: tuple, label_series: bool) -> str:
    series, *rest = category
    return " / ".join([*([_label(series)] if label_series else []), *(f"{v} dev" if i == len(rest) - 1 else str(v) for i, v in enumerate(rest))])


def _colours(names: list[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return {name: cmap(i % 10) for i, name in enumerate(names)}


def _save(fig, folder: Path, name: str, table: str, alt: str) -> Plot:
    fig.savefig(folder / name, dpi=DPI)
    width, height = (int(round(v)) for v in fig.get_size_inches() * DPI)
    return Plot(name, alt, width, height, alt, table)
