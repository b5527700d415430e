"""The report's per-rank figures: per point (a configuration's runs), the step times of every rank of its newest
run (dlrun.report.ranks.RankTimes), so that the rank the others waited for stands out.

ranks-N.png   one horizontal bar per rank: its median time until it was ready to communicate and its median
              wait for the all-reduce after that, stacked (where a DDP hook timed them; else its median step),
              its median and 95th-percentile step marked; the slowest rank's bar red, with its ratio
"""
from __future__ import annotations

from pathlib import Path

from dlrun.report.gather import Report
from dlrun.report.plots import DPI, PAGE_WIDTH_PX, Area, Plot, _figure, _save
from dlrun.report.ranks import MAX_RANKS, RankTimes

READY, WAIT, SLOW = "#4dabf7", "#ced4da", "#e03131"


def draw(report: Report, folder: Path) -> list[Plot]:
    """One figure per point with per-rank times."""
    return [_figure_of(times, k + 1, folder) for k, times in enumerate(report.ranks)]


def _shown(times: RankTimes) -> list[int]:
    ranks = list(range(len(times.names)))
    if len(ranks) <= MAX_RANKS:
        return ranks
    slow = times.slowest.get("rank") if times.slowest else None
    kept = ranks[:MAX_RANKS - 1]
    return kept + [slow if isinstance(slow, int) and slow not in kept else ranks[MAX_RANKS - 1]]


def _figure_of(times: RankTimes, number: int, folder: Path) -> Plot:
    shown = _shown(times)
    width = PAGE_WIDTH_PX / DPI
    fig = _figure(width, 1.4 + 0.28 * len(shown))
    ax = fig.add_subplot(1, 1, 1)
    slow = times.slowest.get("rank") if times.slowest else None
    ys = list(range(len(shown)))
    first = [times.ready_p50[r] if times.ready_p50 else times.step_p50[r] for r in shown]
    colours = [SLOW if r == slow and times.reasons else READY for r in shown]
    ax.barh(ys, first, color=colours, label="time until ready to communicate (p50)" if times.ready_p50
            else "step (p50)")
    if times.wait_p50:
        ax.barh(ys, [times.wait_p50[r] for r in shown], left=first, color=WAIT, label="wait for the all-reduce (p50)")
    ax.plot([times.step_p50[r] for r in shown], ys, "k|", markersize=10, label="step p50")
    ax.plot([times.step_p95[r] for r in shown], ys, "kx", markersize=5, label="step p95")
    ax.set_yticks(ys, [times.names[r] for r in shown], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds per step")
    ax.grid(True, axis="x", linestyle=":", linewidth=0.6)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0))
    said = f"; rank {slow} at {times.slowest['ratio']:g}× the others' median" if times.slowest else ""
    ax.set_title(f"{times.label}: run {times.run_id}{said}", fontsize=10)
    fig.subplots_adjust(left=3.2 / width, right=1 - 2.6 / width, top=1 - 0.35 / fig.get_size_inches()[1],
                        bottom=0.55 / fig.get_size_inches()[1])
    plot = _save(fig, folder, f"ranks-{number}.png", times.anchor,
                 f"per-rank step times of run {times.run_id} ({times.label})")
    box = ax.get_window_extent()
    plot.areas = [Area("rect", [int(box.x0), 0, int(box.x1), plot.height], f"#{times.anchor}",
                       f"{times.label}: run {times.run_id}")]
    plot.notes = list(times.reasons)
    if len(shown) < len(times.names):
        plot.notes.append(f"{len(times.names) - len(shown)} more rank(s) in the run")
    return plot
