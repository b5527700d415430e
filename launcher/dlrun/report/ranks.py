"""What the report shows of the ranks of each point: per point its newest run's per-rank step times (each
rank's p50 and p95 step, its median time until it was ready to communicate and its median wait for the
all-reduce after that, as the PyTorch harness recorded them: dlrun.harness.harness_pytorch_ranktime), for the
per-rank figures (dlrun.report.ranks_plot). A run of one rank, or without the figures (an older run, a log of
another tool), has none.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlrun.results.store import Store

#: Per-rank figures drawn (one per point, the first points in table order).
MAX_FIGURES = 12
#: Ranks drawn in one figure (the slowest always among them); the figure's note counts the rest.
MAX_RANKS = 64


@dataclass
class RankTimes:
    """One run's per-rank times (seconds), in rank order."""

    anchor: str                      # the point's table row
    label: str                       # what the point is
    run_id: str
    names: list[str]                 # "rank R (HOST, DEVICE)"
    step_p50: list[float]
    step_p95: list[float]
    ready_p50: list[float] | None    # None where no DDP hook timed the ranks
    wait_p50: list[float] | None
    slowest: dict[str, Any] | None   # the harness's slowest_rank
    reasons: list[str] = field(default_factory=list)  # the run's straggler reasons


def _numbers(values: Any, count: int) -> list[float] | None:
    if not isinstance(values, list) or len(values) != count:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return None
    return [float(v) for v in values]


def rank_times(run: dict[str, Any], anchor: str, label: str) -> RankTimes | None:
    """The per-rank times of a stored run (`Store.get_run`), or None where it has none for several ranks."""
    extra = next((r.get("extra") for r in run.get("results") or [] if isinstance(r.get("extra"), dict)), None) or {}
    steps = extra.get("per_rank_step_p50_s")
    count = len(steps) if isinstance(steps, list) else 0
    p50, p95 = _numbers(steps, count), _numbers(extra.get("per_rank_step_p95_s"), count)
    if count < 2 or p50 is None or p95 is None:
        return None
    hosts, devices = extra.get("per_rank_host") or [], extra.get("per_rank_device") or []
    names = [f"rank {r}" + (f" ({str(hosts[r])[:40]}, {str(devices[r])[:40]})" if r < len(hosts) and r < len(devices)
                            else "") for r in range(count)]
    slowest = extra.get("slowest_rank") if isinstance(extra.get("slowest_rank"), dict) else None
    reasons = [r for r in (run.get("quality") or {}).get("reasons") or [] if str(r).startswith("straggler: ")]
    return RankTimes(anchor, label, run["id"], names, p50, p95, _numbers(extra.get("per_rank_ready_p50_s"), count),
                     _numbers(extra.get("per_rank_wait_p50_s"), count), slowest, reasons)


def gather_ranks(store: Store, points: list[Any]) -> list[RankTimes]:
    """Per point (objects with `anchor`, `run_ids` and `provenance()`), its newest run's per-rank times, for the
    first MAX_FIGURES points that have them."""
    out: list[RankTimes] = []
    for point in points:
        if len(out) >= MAX_FIGURES:
            break
        if not point.run_ids:
            continue
        newest = max(point.run_ids)  # run ids begin with their start time (YYYYMMDD-HHMMSS-...)
        found = rank_times(store.get_run(newest), point.anchor, point.provenance().split(":")[0])
        if found is not None:
            out.append(found)
    return out
