"""`dlrun reproduce --until-stable`: after the repeats an experiment asks for, one more run of every point
whose 95 % interval is still wider than the target, round after round, until each is narrow enough or has
the most runs allowed. The interval is the statistics module's (dlrun.results.compare.stats.summarize, called
through its public function only); below its minimum of runs there is none, and the point is not stable."""
from __future__ import annotations

from dataclasses import dataclass

from dlrun.reproduce.runner import Step, schedule
from dlrun.reproduce.work import PointWork
from dlrun.results.compare.stats import summarize

PRIMARY = ("throughput", "busbw")


@dataclass(frozen=True)
class Stability:
    runs: int
    half_width: float | None   # of the 95 % interval, relative to its middle; None: no interval yet

    def within(self, target: float) -> bool:
        return self.half_width is not None and self.half_width <= target


def stability(work: PointWork) -> Stability:
    """How narrow the point's interval is, over its stored runs' primary metric."""
    for metric in PRIMARY:
        values = [run.values[metric] for run in work.stored if metric in run.values]
        if values:
            summary = summarize(values)
            low, high = summary.ci_low, summary.ci_high
            width = (high - low) / (high + low) if low is not None and high is not None and high + low > 0 else None
            return Stability(len(values), width)
    return Stability(0, None)


def more_repeats(works: list[PointWork], within: float, max_repeats: int) -> list[Step]:
    """One more run of every point that can run and is not yet stable, below `max_repeats` runs (round-robin
    over them, as the first round)."""
    unstable = [work for work in works if work.plan is not None and not work.skip and len(work.stored) < max_repeats
                and not stability(work).within(within)]
    for work in unstable:
        work.repeats = len(work.stored) + 1
    return schedule(unstable)
