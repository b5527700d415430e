"""`compare`: stored runs against each other or against published values, like-for-like or refused.

Runs are selected by filters (SQL), grouped by comparability key (SQL), placed in rows and along an
axis, and checked: every key field other than the axis and the row fields must match, and unknown fields
never match. A comparison that is not like-for-like raises MismatchError listing each difference, unless
`allow_mismatch` is set; then the returned Comparison carries the differences and says it is not
like-for-like.

Modes (see model.MODES): summary (statistics per configuration), reference, relative, scaling, fabrics,
regression, history (each run against its key's own last N ok runs: the machine's baseline, `history`).
The axis (`by`) picks the mode when no mode is given: system/site -> relative, devices ->
scaling, fabric -> fabrics, any other axis -> regression; with references and no axis: reference.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from dlrun.errors import DlrunError, UsageError, unknown_name
from dlrun.results.store.query import Filters
from dlrun.results.store import Store

from dlrun.results.compare import axes, groups as by_key, measured, verdicts
from dlrun.results.compare.history import DEFAULT_LAST, history
from dlrun.results.compare.efficiency import EfficiencyInputs
from dlrun.results.compare.types import (AXES, AXIS_MODES, MODE_OF_AXIS, MODES, Axis, Comparison, MismatchError,
                                         Reference, Source)
from dlrun.results.compare.select import Group, dropped_note, listed_note, load_groups

__all__ = ["AXES", "MODES", "Comparison", "EfficiencyInputs", "MismatchError", "Reference", "Source", "compare",
           "resolve_mode"]

#: Builds the efficiency inputs (system profiles, model FLOP counts) for the keys of the selected runs.
FactsProvider = Callable[[list[dict[str, Any]]], EfficiencyInputs]


def resolve_mode(mode: str | None, by: str | None, has_references: bool) -> tuple[str, Axis | None]:
    """(mode, axis) from what the user gave; a combination that makes no sense is a UsageError."""
    if by is not None and by not in AXES:
        raise unknown_name("axis (--by)", by, AXES)
    if mode is not None and mode not in MODES:
        raise unknown_name("mode", mode, MODES)
    if mode is None:
        if by is not None:
            mode = MODE_OF_AXIS.get(by, "regression")
        else:
            mode = "reference" if has_references else "summary"
    if mode in ("summary", "reference", "history"):
        if by is not None:
            raise UsageError(f"--mode {mode} compares no axis; leave out --by {by} (or use --mode regression)")
        if mode == "reference" and not has_references:
            raise UsageError("--mode reference needs a published value: --reference VALUE or --references FILE")
        return mode, None
    if has_references:
        raise UsageError(f"--reference/--references belong to --mode reference, not --mode {mode}")
    by = by or MODES[mode]
    if by not in AXIS_MODES[mode]:
        fitting = [m for m, allowed in AXIS_MODES.items() if by in allowed]
        raise UsageError(f"--mode {mode} compares along {' or '.join(AXIS_MODES[mode])}, not --by {by}; "
                         f"--by {by} works with --mode {' or '.join(fitting)}")
    return mode, AXES[by]


def compare(store: Store, filters: Filters, *, mode: str | None = None, by: str | None = None,
            baseline: str | None = None, references: Sequence[Reference] = (), allow_mismatch: bool = False,
            facts: FactsProvider | None = None, metric: str = "rate", last: int = DEFAULT_LAST,
            tolerance: float = 0.05) -> Comparison:
    """The comparison of the selected runs' `metric` (measured.METRICS); raises MismatchError when they are
    not like-for-like and `allow_mismatch` is not set. `last` and `tolerance` (a fraction) are the history
    mode's: how many of a key's runs make its baseline, and how far below it a run must be to be called so."""
    mode, axis = resolve_mode(mode, by, bool(references))
    if mode == "history":
        if metric != "rate":
            raise UsageError(f"--mode history judges the runs' rate, not --metric {metric}")
        return history(store, filters, last=last, tolerance=tolerance)
    measured.check_metric(metric, mode)
    if baseline is not None and axis is None:
        raise UsageError(f"--baseline needs an axis to pick from; --mode {mode} has none")
    try:
        selected = load_groups(store, filters, by_site=axis is not None and axis.name == "site", compared=metric,
                               summed=True)
    except DlrunError as exc:
        raise _nothing_to_compare(store, filters) or exc from None
    if mode == "summary":
        result = by_key.summary(selected, _inputs(store, selected, facts))
    elif mode == "reference":
        result = by_key.reference(selected, list(references), _inputs(store, selected, facts))
    elif mode == "relative":
        result = axes.relative(selected, axis, baseline)
    elif mode == "scaling":
        result = axes.scaling(selected, axis, baseline, _inputs(store, selected, facts))
    elif mode == "fabrics":
        result = axes.fabrics(selected, axis, baseline)
    else:
        result = axes.regression(selected, axis, baseline)
    verdicts.annotate(result, selected, store.run_reasons(verdicts.run_ids(selected), "straggler"))
    units = {g.unit for g in selected}
    result.unit = units.pop() if len(units) == 1 else None
    if result.differences and not allow_mismatch:
        raise MismatchError(result.differences, _other_axis(axis, result.differences))
    if not result.rows:
        result.notes.append("no row could be compared: every row lacks runs at the baseline")
    result.notes += (dropped_note(selected) + listed_note(selected) + measured.unmeasured_note(selected)
                     + measured.metric_note(metric))
    return result


def _other_axis(axis: Axis | None, differences: list[str]) -> str | None:
    """Where runs of several sites differ along --by host (each site's machines): the axis that compares sites."""
    if axis is not None and axis.name == "host" and any(line.startswith("site: ") for line in differences):
        return ("the runs come from several sites; --by site compares the sites (each site's runs, whatever "
                "its machines), --site SITE keeps one site's machines")
    return None


def _nothing_to_compare(store: Store, filters: Filters) -> DlrunError | None:
    """Where the selection holds counted model facts (Table II) rather than measurements: an error that
    says so and where they are set against the published numbers; None otherwise."""
    for run in store.list_runs(20, filters):
        if run["status"] != "ok" or run["value"] is not None:
            continue
        stored = store.get_run(run["id"])
        if any(result.get("kind") == "model-facts" for result in stored["results"]):
            experiment = stored.get("experiment")
            where = (f"dlrun report --experiment {experiment} --out DIR (or dlrun reproduce {experiment})"
                     if experiment else "dlrun results show RUN_ID")
            return DlrunError("nothing to compare: the selected runs hold counted model facts (parameters, "
                              f"multiply-adds), not repeated measurements; {where} sets them against the "
                              "published numbers")
    return None


def _inputs(store: Store, selected: list[Group], facts: FactsProvider | None) -> EfficiencyInputs:
    inputs = facts([g.key for g in selected]) if facts else EfficiencyInputs()
    inputs.matmul = functools.lru_cache(maxsize=None)(store.latest_matmul)
    return inputs
