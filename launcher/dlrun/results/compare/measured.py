"""What compare compares besides the rate itself (`--metric`), and the runs that lack it: samples per joule
(higher is better), read from the telemetry a run stored. A run without an energy reading is left out with
the reason and counted in a note, never taken as zero."""
from __future__ import annotations

import math
from typing import Any

from dlrun.errors import UsageError, unknown_name
from dlrun.results.store.schema import COMPARED_VALUES

#: --metric names (dlrun.results.store.schema.COMPARED_VALUES) and the group metric their values stand for.
METRICS = {"rate": None, "samples-per-joule": "samples_per_joule"}
#: Modes whose columns mean something for a metric other than the rate (scaling efficiency is of throughput).
MODES_OF = {"samples-per-joule": ("summary", "reference", "relative", "fabrics", "regression")}
#: Why a run lacks the compared value, from the word the store gives in its place.
UNMEASURED = {"nan": "energy not readable here (no RAPL, GPU energy counter or power reading over the timed "
                     "window where it ran)",
              "-inf": "no telemetry (run with --telemetry off, or stored before dlrun recorded it)"}
#: The compared value's unit from the result's: a rate per second -> samples per joule.
PER_JOULE = {"images/sec": "images/J", "sequences/sec": "sequences/J", "tokens/sec": "tokens/J",
             "samples/sec": "samples/J"}
#: How a regression sentence names a lower and a higher value of the metric.
WORDS = {"samples_per_joule": ("less energy-efficient", "more energy-efficient")}


def check_metric(metric: str, mode: str) -> None:
    if metric not in COMPARED_VALUES:
        raise unknown_name("metric (--metric)", metric, list(COMPARED_VALUES))
    allowed = MODES_OF.get(metric)
    if allowed and mode not in allowed:
        raise UsageError(f"--metric {metric} compares with --mode {', '.join(allowed)}, not --mode {mode} "
                         "(its columns are of throughput)")


def unmeasured(run_ids: list[str], values: list[float]) -> dict[str, list[str]]:
    """why -> the runs whose value is the store's word for a missing one."""
    out: dict[str, list[str]] = {}
    for run_id, value in zip(run_ids, values):
        word = "nan" if math.isnan(value) else "-inf" if value == -math.inf else None
        if word:
            out.setdefault(UNMEASURED[word], []).append(run_id)
    return out


def metric_and_unit(compared: str, row: dict[str, Any]) -> tuple[str, str]:
    """The group's metric and unit for the compared value of a grouped store row."""
    if METRICS.get(compared) is None:
        return row["metric"], row["unit"]
    return METRICS[compared], PER_JOULE.get(row["unit"], f"samples/J ({row['unit']})")


def metric_note(metric: str) -> list[str]:
    if metric != "samples-per-joule":
        return []
    return ["samples per joule: the samples a run processed in its timed window over the joules its telemetry "
            "measured in that window (GPU energy counters or power readings, CPU RAPL where readable; the "
            "energy each run covers is in dlrun results show); higher is better"]


def _shown(run_ids: list[str]) -> str:
    return ", ".join(run_ids[:6]) + (f" and {len(run_ids) - 6} more" if len(run_ids) > 6 else "")


def unmeasured_text(by_reason: dict[str, list[str]]) -> list[str]:
    return [f"{len(ids)} run(s) left out, not counted as zero: {why}: {_shown(sorted(ids))}"
            for why, ids in sorted(by_reason.items())]


def unmeasured_note(groups: list[Any]) -> list[str]:
    """Notes for the runs the compared groups left out for lack of the value."""
    merged: dict[str, list[str]] = {}
    for group in groups:
        for why, ids in group.unmeasured.items():
            merged.setdefault(why, []).extend(ids)
    return unmeasured_text(merged)
