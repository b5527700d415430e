"""The report's telemetry figures: per point (a configuration's runs), the power (W) and utilisation (%) of
every device of its newest run with a series, over the seconds since the job's first sample, the timed
window shaded (dlrun.report.energy.Trace). A device whose power could not be read has no power line and the
figure says so; nothing is drawn as zero for want of a reading.

telemetry-N.png   two panels sharing the time axis: power per device (GPU power readings; CPU package
                  power from RAPL counter growth where readable), utilisation per device (GPU utilisation;
                  CPU as the mean over its cores)
"""
from __future__ import annotations

from pathlib import Path

from dlrun.report.energy import Trace
from dlrun.report.gather import Report
from dlrun.report.plots import DPI, PAGE_WIDTH_PX, Area, Plot, _colours, _figure, _save

#: Lines per panel (devices); the figure's note counts the rest.
MAX_LINES = 16


def draw(report: Report, folder: Path) -> list[Plot]:
    """One figure per trace of the report's telemetry."""
    return [_figure_of(trace, k + 1, folder) for k, trace in enumerate(report.telemetry.traces)]


def _panel(ax, lines: dict[str, list[tuple[float, float]]], colours, ylabel: str, window) -> list[str]:
    names = sorted(lines)[:MAX_LINES]
    for name in names:
        points = lines[name]
        ax.plot([t for t, _ in points], [v for _, v in points], linewidth=1.2, color=colours[name], label=name,
                marker="." if len(points) < 30 else None)
    if window is not None:
        ax.axvspan(window[0], window[1], color="#ffd43b", alpha=0.25, label="timed window")
    ax.set_ylabel(ylabel)
    ax.grid(True, linestyle=":", linewidth=0.6)
    if names or window is not None:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0))
    return [f"{len(lines) - MAX_LINES} more device(s) in the series"] if len(lines) > MAX_LINES else []


def _figure_of(trace: Trace, number: int, folder: Path) -> Plot:
    width = PAGE_WIDTH_PX / DPI
    fig = _figure(width, 4.8)
    power = fig.add_subplot(2, 1, 1)
    util = fig.add_subplot(2, 1, 2, sharex=power)
    colours = _colours(sorted(set(trace.power) | set(trace.util)))
    notes = _panel(power, trace.power, colours, "power (W)", trace.window)
    notes += _panel(util, trace.util, colours, "utilisation (%)", trace.window)
    if not trace.power:
        power.text(0.5, 0.5, "no power reading: not readable here", transform=power.transAxes, ha="center",
                   va="center", fontsize=9, color="#555")
    util.set_ylim(0, 105)
    util.set_xlabel("seconds since the job's first sample")
    power.set_title(f"{trace.label}: run {trace.run_id}", fontsize=10)
    fig.subplots_adjust(left=0.7 / width, right=1 - 2.4 / width, top=0.92, bottom=0.11, hspace=0.3)
    name = f"telemetry-{number}.png"
    plot = _save(fig, folder, name, trace.anchor,
                 f"power and utilisation over time per device of run {trace.run_id} ({trace.label})")
    box = power.get_window_extent()
    plot.areas = [Area("rect", [int(box.x0), 0, int(box.x1), plot.height], f"#{trace.anchor}",
                       f"{trace.label}: run {trace.run_id}")]
    plot.notes = notes + trace.notes
    return plot
