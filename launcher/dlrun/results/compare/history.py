"""`compare --mode history`: each selected run against the site's own history for its key, the baseline of
that machine: the last N successful runs stored before it with the same comparability key (which holds the
site and the machine's fingerprint, so the history is this site's runs on this kind of machine).

The baseline is the history's median, with the 95 % prediction interval for one more run of it: the t interval
on the logs of the history (mean log +- t(0.975, n-1) x sd x sqrt(1 + 1/n), taken back with exp), so that a
run that behaves like its history falls inside it 95 % of the time. A run is `below baseline` when it lies
under the interval's low end and more than the tolerance under the median (`above baseline` the other way;
for a latency, lower is better and the words follow that), else `within baseline`; below MIN_REPEATS runs of
history, or with a key that has unknown fields, there is `no baseline`, and the row says why.
"""
from __future__ import annotations

import math
from typing import Any

from dlrun.errors import UsageError
from dlrun.results.key import KEY_FIELDS, UNKNOWN
from dlrun.results.parsers.figure_of_merit import direction
from dlrun.results.store import Store
from dlrun.results.store.query import Filters
from dlrun.results.store.schema import PRIMARY_METRICS

from dlrun.results.compare.stats import CONFIDENCE, MIN_REPEATS, logs, mean, median, stdev, t_quantile
from dlrun.results.compare.types import Comparison

#: How many of a key's latest successful runs make its baseline, unless `--last` says otherwise.
DEFAULT_LAST = 10
MAX_LAST = 1000
COLUMNS = ["run_id", "created_at", "workload", "model", "system", "devices", "site", "key_hash", "metric", "value",
           "unit", "history_n", "history_median", "interval_low", "interval_high", "deviation_pct", "verdict",
           "verdict_why", "history_runs"]
METHOD = (f"baseline: the median of the last N ok runs stored before the run with its key (site and machine "
          f"included); interval: the {CONFIDENCE:.0%} prediction interval for one more such run, t on the logs "
          "of those runs (mean log +- t x sd x sqrt(1 + 1/n)), taken back with exp")


def check_last(last: int) -> None:
    """How many runs a baseline is made of (`--last` of compare --mode history and of diagnose)."""
    if not 1 <= last <= MAX_LAST:
        raise UsageError(f"bad --last {last}; valid: 1 to {MAX_LAST} runs (the baseline's)")


def history(store: Store, filters: Filters, *, last: int = DEFAULT_LAST, tolerance: float = 0.05) -> Comparison:
    """One row per judged run: the selected run ids, else the newest successful run of each selected key."""
    check_last(last)
    rows = [_row(store, run, last, tolerance) for run in _judged(store, filters)]
    notes = [] if rows else ["no successful run selected: nothing to judge against its history"]
    comparison = Comparison("history", f"each run against the last {last} ok runs of its key (its machine's "
                            "baseline)", COLUMNS, rows, notes=notes)
    comparison.statistics = {**comparison.statistics, "baseline": METHOD, "last": last, "tolerance": tolerance}
    units = {row["unit"] for row in rows}
    comparison.unit = units.pop() if len(units) == 1 else None
    return comparison


def _judged(store: Store, filters: Filters) -> list[dict[str, Any]]:
    runs = [run for run in store.list_runs(None, filters) if run["status"] == "ok" and run["value"] is not None]
    if filters.run_ids:
        return runs
    newest: dict[str, dict[str, Any]] = {}
    for run in runs:  # newest first
        newest.setdefault(run["key_hash"], run)
    return list(newest.values())


def _history(store: Store, run: dict[str, Any], last: int) -> list[tuple[str, float]]:
    """(run id, value) of the last `last` ok runs with the run's key stored before it, newest first."""
    return key_history(store, run["key_hash"], run["unit"], before=run["created_at"], before_id=run["id"], last=last)


def _row(store: Store, run: dict[str, Any], last: int, tolerance: float) -> dict[str, Any]:
    stored = store.get_run(run["id"])
    key = stored.get("key") or {}
    metric = next((r.get("metric") for r in stored["results"] if r.get("metric") in PRIMARY_METRICS), None)
    past = _history(store, run, last)
    row: dict[str, Any] = {
        "run_id": run["id"], "created_at": run["created_at"], "workload": run["workload"], "model": run["model"],
        "system": run["system"], "devices": key.get("devices"), "site": key.get("site"), "key_hash": run["key_hash"],
        "metric": metric, "value": run["value"], "unit": run["unit"], "history_n": len(past),
        "history_median": None, "interval_low": None, "interval_high": None, "deviation_pct": None,
        "history_runs": [run_id for run_id, _ in past]}
    unknown = [name for name in KEY_FIELDS if key.get(name) == UNKNOWN]
    if unknown:
        return {**row, "verdict": "no baseline", "verdict_why": (
            f"its key has unknown fields ({', '.join(unknown[:6])}{', ...' if len(unknown) > 6 else ''}): no "
            "stored run can be told to be like it")}
    return {**row, **judge(run["value"], [value for _, value in past], tolerance, metric)}


def judge(value: float, past: list[float], tolerance: float, metric: str | None) -> dict[str, Any]:
    """`value` against the baseline of `past` (the values of a key's earlier ok runs): its median, interval,
    deviation and verdict, or `no baseline` below MIN_REPEATS values."""
    if len(past) < MIN_REPEATS:
        return {"verdict": "no baseline", "verdict_why": (
            f"{len(past)} ok run(s) of its key stored before it; a baseline needs at least {MIN_REPEATS}")}
    low, high = _prediction_interval(past)
    centre = median(past)
    deviation = (value / centre - 1) * 100
    return {"history_median": centre, "interval_low": low, "interval_high": high, "deviation_pct": deviation,
            **_verdict(value, low, high, deviation, tolerance, direction(metric or "throughput"))}


def key_history(store: Store, key_hash: str, unit: str, *, before: str, before_id: str = "",
                last: int = DEFAULT_LAST, exclude: frozenset[str] = frozenset()) -> list[tuple[str, float]]:
    """(run id, value) of the last `last` ok runs of a key stored before the time `before` (a store
    timestamp; at that very time, those whose id sorts before `before_id`), the runs `exclude` names left out,
    newest first: the machine's baseline at that time."""
    metrics = ", ".join(f"'{m}'" for m in PRIMARY_METRICS)
    with store.reading() as conn:
        found = conn.execute(
            "SELECT r.id, res.value FROM runs r JOIN results res ON res.run_id = r.id AND res.metric IN "
            f"({metrics}) WHERE r.key_hash = ? AND r.status = 'ok' AND res.unit = ? AND "
            "(r.created_at < ? OR (r.created_at = ? AND r.id < ?)) ORDER BY r.created_at DESC, r.id DESC LIMIT ?",
            (key_hash, unit, before, before, before_id, last + len(exclude))).fetchall()
    return [(run_id, value) for run_id, value in found if run_id not in exclude][:last]


def _prediction_interval(values: list[float]) -> tuple[float, float]:
    """The 95 % prediction interval of one more run, t on the logs of `values` (at least 2)."""
    on_logs = logs(values)
    n, centre, sd = len(on_logs), mean(on_logs), stdev(on_logs) or 0.0
    half = t_quantile(0.5 + CONFIDENCE / 2, n - 1) * sd * math.sqrt(1 + 1 / n)
    return math.exp(centre - half), math.exp(centre + half)


def _verdict(value: float, low: float, high: float, deviation: float, tolerance: float,
             better: str) -> dict[str, str]:
    band = f"{tolerance * 100:g} %"
    if value < low and deviation < -tolerance * 100:
        word = "below baseline" if better == "higher" else "better than baseline"
    elif value > high and deviation > tolerance * 100:
        word = "above baseline" if better == "higher" else "worse than baseline"
    else:
        return {"verdict": "within baseline", "verdict_why": (
            f"{deviation:+.1f} % from the median, inside the interval [{low:.4g}, {high:.4g}] or within "
            f"{band} of the median")}
    side = "under" if value < low else "over"
    return {"verdict": word, "verdict_why": (
        f"{deviation:+.1f} % from the median, {side} the {CONFIDENCE:.0%} prediction interval [{low:.4g}, "
        f"{high:.4g}] and beyond the {band} tolerance")}
