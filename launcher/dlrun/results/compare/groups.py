"""Modes without an axis: statistics per configuration (`summary`) and runs against published values
(`reference`). Each configuration's estimate is the geometric mean of its repeats with the t interval of
their logs (dlrun.results.compare.stats); a published value is judged by that interval against its tolerance band."""
from __future__ import annotations

import math
from typing import Any

from dlrun.results.key import KEY_FIELDS, UNKNOWN
from dlrun.results.compare.key_diff import spread
from dlrun.results.compare.stats import judge, summarize

from dlrun.results.compare.efficiency import EfficiencyInputs, columns_for, efficiency
from dlrun.results.compare.types import Comparison, Reference, sort_value
from dlrun.results.compare.select import Group

STAT_COLUMNS = ["n", "geomean", "ci_low", "ci_high", "interval", "stdev", "median", "min", "max"]
REFERENCE_COLUMNS = ["reference", "tolerance", "ratio", "ratio_low", "ratio_high", "deviation_pct", "verdict",
                     "repeats_needed", "verdict_why", "label", "source_doc", "source_where", "source_quote"]
# Units published tables use for the same thing dlrun stores.
UNIT_ALIASES = {"img/s": "images/sec", "images/s": "images/sec", "images/second": "images/sec",
                "img/sec": "images/sec", "GB/sec": "GB/s"}


def stat_fields(values: list[float]) -> dict[str, Any]:
    return summarize(values).to_dict()


def key_fields(key: dict[str, Any]) -> dict[str, Any]:
    return {name: key.get(name) for name in KEY_FIELDS}


def _efficiency_columns(groups: list[Group]) -> list[str]:
    columns: list[str] = []
    for metric in sorted({g.metric for g in groups}):
        columns += [c for c in columns_for(metric) if c not in columns]
    return columns


def summary(groups: list[Group], inputs: EfficiencyInputs) -> Comparison:
    """One row per configuration (key): n, geometric mean, 95 % CI, spread, and the efficiency columns."""
    notes: set[str] = set()
    rows = []
    for group in sorted(groups, key=lambda g: [sort_value(g.key.get(f)) for f in KEY_FIELDS]):
        stats = stat_fields(group.values)
        rows.append({**key_fields(group.key), "key_hash": group.key_hash, **stats, "unit": group.unit,
                     **efficiency(group.key, group.metric, stats["geomean"], inputs, notes),
                     "runs": sorted(group.run_ids)})
    columns = [*KEY_FIELDS, "key_hash", *STAT_COLUMNS, "unit", *_efficiency_columns(groups), "runs"]
    return Comparison("summary", "statistics per configuration (repeats with one comparability key)", columns,
                      rows, notes=sorted(notes))


def _matches(key: dict[str, Any], reference: Reference) -> bool:
    return all(key.get(name) == value for name, value in reference.match.items())


def _condition_differences(key: dict[str, Any], reference: Reference) -> list[str]:
    out = []
    for name, stated in reference.conditions.items():
        here = key.get(name, UNKNOWN)
        label = KEY_FIELDS.get(name, name)
        if here == UNKNOWN:
            out.append(f"{label}: unknown here, {stated} in {reference.source.doc} (cannot tell whether they match)")
        elif here != stated:
            out.append(f"{label}: {here} here, {stated} in {reference.source.doc}")
    return out


def reference(groups: list[Group], references: list[Reference], inputs: EfficiencyInputs) -> Comparison:
    """Each configuration against the published value that applies to it: the ratio of its geometric mean
    to the value, and the verdict of its interval against the tolerance band (within, outside or
    inconclusive), with the publication's words next to the number."""
    notes: set[str] = set()
    differences: list[str] = []
    rows = []
    matched: set[str] = set()
    for ref in references:
        mine = [g for g in groups if _matches(g.key, ref)]
        if not mine:
            notes.add(f"no selected run matches the reference {ref.label or ref.value} ({ref.source.doc})")
            continue
        differences += spread([(g.key, len(g.values)) for g in mine])
        for group in mine:
            matched.add(group.key_hash)
            unit = UNIT_ALIASES.get(ref.unit, ref.unit) or group.unit  # no unit given: the runs' own
            if group.unit != unit:
                differences.append(f"unit: {group.unit} here, {ref.unit} in {ref.source.doc}")
                continue
            differences += _condition_differences(group.key, ref)
            quote = f': "{ref.source.quote}"' if ref.source.quote else ""
            notes.add(f"source: {ref.source.doc}{', ' + ref.source.where if ref.source.where else ''}{quote}")
            summarized = summarize(group.values)
            stats = summarized.to_dict()
            ratio = stats["geomean"] / ref.value
            verdict = judge(summarized.estimate, *_band(ref))
            rows.append({**key_fields(group.key), "key_hash": group.key_hash, **stats, "unit": group.unit,
                         "reference": ref.value, "tolerance": ref.tolerance, "ratio": ratio,
                         "ratio_low": None if stats["ci_low"] is None else stats["ci_low"] / ref.value,
                         "ratio_high": None if stats["ci_high"] is None else stats["ci_high"] / ref.value,
                         "deviation_pct": (ratio - 1.0) * 100.0, "verdict": verdict.verdict,
                         "repeats_needed": verdict.repeats_needed, "verdict_why": verdict.why,
                         "label": ref.label, "source_doc": ref.source.doc, "source_where": ref.source.where,
                         "source_quote": ref.source.quote,
                         **efficiency(group.key, group.metric, stats["geomean"], inputs, notes),
                         "runs": sorted(group.run_ids)})
    for group in groups:
        if group.key_hash not in matched:
            notes.add(f"no reference applies to {len(group.values)} run(s) of {group.key.get('workload')} "
                      f"on {group.key.get('system')} with {group.key.get('devices')} devices")
    columns = [*KEY_FIELDS, "key_hash", *STAT_COLUMNS, "unit", *REFERENCE_COLUMNS, *_efficiency_columns(groups),
               "runs"]
    return Comparison("reference", "runs against published values", columns, rows,
                      differences=list(dict.fromkeys(differences)), notes=sorted(notes))


def _band(ref: Reference) -> tuple[float, float]:
    """The tolerance band of a published value, on the log scale of the geometric mean."""
    low = ref.value * (1.0 - ref.tolerance)
    return (math.log(low) if low > 0 else -math.inf), math.log(ref.value * (1.0 + ref.tolerance))
