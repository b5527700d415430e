"""What the tuner measures and how it decides.

1. One trial process times, step by step in alternation, the reference (every knob at its default here) against
   every combination of the fused optimizer step and channels-last, and on top of the reference fewer threads,
   PyTorch's ops instead of the fused batch norm + ReLU kernel (CPUs), cuDNN's heuristics instead of its search
   (GPUs) and torch.compile (only when asked: compiling ResNet-50 takes minutes). A variant's speed-up is the median over rounds of reference step time / its step time, each round
   running every variant once back to back, so that a change of the machine's load meets all of them alike.
2. With the winner of step 1 fixed, one process per allocator and per thread pinning (both are settled before
   torch loads), against the same configuration with the defaults in a process before and one after them.

An in-process knob keeps a value other than its reference (a code-path knob's: PyTorch's own ops, eagerly, in
its default layout; the others': the run's default) only where the 95 % interval of the per-round ratios of the
two variants that differ in it lies wholly above 1 (at least three alternated rounds; a trial that does not
decide keeps the reference). A per-process knob (one process per value, so no interval) moves only where that
process beats both reference processes by more than MARGIN. The decision records every speed-up measured, the
time it took and the machine's load average, because a decision measured on a busy machine is a weaker one.
"""
from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dlrun.harness.harness_contract import CODE_PATH_KNOBS, KNOBS
from dlrun.plan import Plan, variant
from dlrun.tune.trial import TrialFailed, run_trial

#: A knob leaves its default only for a speed-up above this (measured step times on a quiet machine differ by
#: about 1 % between identical variants).
MARGIN = 1.02
#: The interval an in-process knob's trial must show wholly above 1 for a value other than its reference.
LEVEL = 0.95
#: The reference value of each code-path knob: PyTorch's own ops, eagerly, in its default layout.
REFERENCE = dict(CODE_PATH_KNOBS)
IN_PROCESS = ("fused_optimizer", "fused_bn_relu", "channels_last", "threads", "cudnn_benchmark", "compile")
PER_PROCESS = ("allocator", "pin_threads")
#: What `dlrun tune` measures unless told otherwise; torch.compile only on request (minutes of compiling).
DEFAULT_KNOBS = tuple(name for name in KNOBS if name != "compile")
#: What the automatic tuning before a run measures: the knobs one trial process can alternate (each
#: per-process knob costs a process start and a warm-up, tens of seconds for ResNet-50 on a small node).
AUTO_KNOBS = ("fused_optimizer", "fused_bn_relu", "channels_last", "threads", "cudnn_benchmark")
ALLOCATORS = ("tcmalloc", "jemalloc", "glibc-tuned", "system")

Log = Callable[[str], None]


def measurable(plan: Plan, knobs: Iterable[str]) -> list[str]:
    """The knobs of `knobs` this plan leaves to the tuner (not asked for, applicable to its device and model)."""
    return [name for name in knobs if plan.knob_sources.get(name) == "default" and _inapplicable(plan, name) is None]


def _inapplicable(plan: Plan, name: str) -> str | None:
    """Why knob `name` does not apply to this plan's device or model, else None."""
    if name == "cudnn_benchmark" and plan.device != "cuda":
        return "n/a: no GPU"
    if name in ("channels_last", "fused_bn_relu") and plan.workload.kind != "cnn-training":
        return "n/a: the model reads tokens"
    if name == "fused_bn_relu" and plan.device != "cpu":
        return "n/a: a CPU kernel"
    return None


def thread_choices(plan: Plan) -> list[int]:
    """Fewer threads than the run's own: half (a busy or hyper-threaded node can run faster with them)."""
    half = plan.threads_per_rank // 2
    return [half] if half >= 1 else []


def _spec(knobs: list[str], plan: Plan, rounds: int, budget_s: float, base: Mapping[str, Any] | None = None,
          singles: bool = False) -> dict[str, Any]:
    """The trial's variants: every combination of the fused step and channels-last (`grid`), or with `singles`
    each moved alone (the one equal to the reference is dropped by the harness), plus the extras."""
    both = [name for name in ("fused_optimizer", "channels_last") if name in knobs]
    grid = {} if singles else {name: ["on", "off"] for name in both}
    extras: list[dict[str, Any]] = [{name: value} for name in both for value in ("on", "off")] if singles else []
    extras += [{"threads": n} for n in thread_choices(plan)] if "threads" in knobs else []
    # the fused batch norm + ReLU both ways: the one equal to the reference variant is dropped by the harness
    extras += [{"fused_bn_relu": value} for value in ("on", "off")] if "fused_bn_relu" in knobs else []
    extras += [{name: "off" if name == "cudnn_benchmark" else "on"}
               for name in ("cudnn_benchmark", "compile") if name in knobs]
    return {"grid": grid, "extras": extras, "base": dict(base or {}), "rounds": rounds,
            "min_rounds": min(3, rounds), "warmup": 1, "budget_s": budget_s}


def _ran_as_asked(v: Mapping[str, Any]) -> bool:
    # (fused_bn_relu "on" is "where it can run": a channels-last=off variant runs PyTorch's ops, as a run with
    # that decision would)
    return bool((v["knobs"].get("fused_optimizer") != "on" or v.get("fused"))
                and (v["knobs"].get("compile") != "on" or v.get("compiled")))


def speedups(record: Mapping[str, Any]) -> list[float]:
    """Per variant: the median over rounds of the reference's step time over the variant's (1.0 for the
    reference itself); nothing where a variant did not run what it was asked (a fused step that does not exist
    here runs PyTorch's default one)."""
    variants = record["variants"]
    ref = variants[0]["step_s"]
    out = []
    for v in variants:
        pairs = [r / s for r, s in zip(ref, v["step_s"]) if s > 0]
        out.append(statistics.median(pairs) if pairs and _ran_as_asked(v) else float("nan"))
    return out


def win_interval(slower: list[float], faster: list[float], level: float = LEVEL) -> dict[str, Any]:
    """How much faster `faster`'s steps are than `slower`'s, from their per-round pairs (each round ran both
    back to back): the geometric mean of slower / faster with its `level` Student's t interval (none below
    three rounds). `wins`: the whole interval above 1."""
    from dlrun.results.compare.stats import t_quantile

    logs = [math.log(a / b) for a, b in zip(slower, faster) if a > 0 and b > 0]
    n = len(logs)
    if n == 0:
        return {"n": 0, "speedup": float("nan"), "low": None, "high": None, "wins": False}
    centre = statistics.fmean(logs)
    if n < 3:
        return {"n": n, "speedup": math.exp(centre), "low": None, "high": None, "wins": False}
    half = t_quantile(0.5 + level / 2, n - 1) * statistics.stdev(logs) / math.sqrt(n)
    low, high = math.exp(centre - half), math.exp(centre + half)
    return {"n": n, "speedup": math.exp(centre), "low": low, "high": high, "wins": low > 1.0}


def _wins(faster: Mapping[str, Any], slower: Mapping[str, Any]) -> dict[str, Any]:
    """`faster` over `slower` (variants of one trial); never a win for a variant that did not run as asked."""
    interval = win_interval(slower["step_s"], faster["step_s"])
    return interval if _ran_as_asked(faster) and _ran_as_asked(slower) else {**interval, "wins": False}


def _changed(knobs: Mapping[str, Any], ref: Mapping[str, Any]) -> list[str]:
    return [name for name in knobs if knobs[name] != ref.get(name)]


def _find(variants: list[Mapping[str, Any]], knobs: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return next((v for v in variants if v["knobs"] == knobs), None)


def _grid_choice(variants: list[Mapping[str, Any]], names: list[str]) -> tuple[dict[str, Any], float]:
    """The fused step and channels-last: the grid point with the largest decided win over the point with both at
    their reference values, then each of its knobs kept off its reference only where moving that knob alone
    back to it is a decided loss. (the knobs' values, the chosen point's speed-up over the reference point)"""
    base = variants[0]["knobs"]
    reference = _find(variants, {**base, **{n: REFERENCE[n] for n in names}})
    if reference is None:
        return {n: REFERENCE[n] for n in names}, 1.0
    grid = [v for v in variants if set(_changed(v["knobs"], reference["knobs"])) <= set(names)]
    won = [(v, _wins(v, reference)) for v in grid if v is not reference]
    won = [(v, w) for v, w in won if w["wins"]]
    if not won:
        return {n: REFERENCE[n] for n in names}, 1.0
    best = max(won, key=lambda item: item[1]["speedup"])[0]
    chosen = {n: best["knobs"][n] for n in names}
    for name in _changed(best["knobs"], reference["knobs"]):
        back = _find(variants, {**best["knobs"], name: REFERENCE[name]})
        if back is not None and back is not best and not _wins(best, back)["wins"]:
            chosen[name] = REFERENCE[name]
    final = _find(variants, {**best["knobs"], **chosen}) or reference
    return chosen, _wins(final, reference)["speedup"] if final is not reference else 1.0


def choose(record: Mapping[str, Any], knobs: list[str]) -> tuple[dict[str, Any], dict[str, float]]:
    """(the chosen value of every measured in-process knob, the speed-up each choice is worth over the
    value it replaces). A knob keeps a value other than its reference (a code-path knob's, REFERENCE; else the
    run's default: its threads, cuDNN's search) only where the 95 % interval of the per-round ratios of the
    variants that differ in it lies wholly above 1 (`win_interval`); an undecided trial keeps the reference."""
    variants = record["variants"]
    base = variants[0]["knobs"]
    grid_names = [n for n in ("fused_optimizer", "channels_last") if n in knobs and base.get(n) != "n/a"]
    chosen = {name: REFERENCE.get(name, base[name]) for name in knobs if name in base and base[name] != "n/a"}
    gain = {name: 1.0 for name in chosen}
    if grid_names:
        grid, speedup = _grid_choice(variants, grid_names)
        chosen.update(grid)
        gain.update({n: speedup for n in grid_names if grid[n] != REFERENCE[n]})
    for v in variants[1:]:
        changed = _changed(v["knobs"], base)
        if len(changed) != 1 or changed[0] in grid_names or changed[0] not in chosen:
            continue
        name = changed[0]
        reference = REFERENCE.get(name, base[name])
        other, ref_variant = (v, variants[0]) if v["knobs"][name] != reference else (variants[0], v)
        interval = _wins(other, ref_variant)
        if interval["wins"] and interval["speedup"] > gain.get(name, 1.0):
            chosen[name], gain[name] = other["knobs"][name], interval["speedup"]
    return chosen, gain


def _median_step(record: Mapping[str, Any]) -> float:
    return statistics.median(record["variants"][0]["step_s"])


def choose_per_process(reference: list[float], alternatives: Mapping[str, Mapping[str, float]]
                       ) -> tuple[dict[str, Any], dict[str, float]]:
    """For each per-process knob: the alternative whose median step beats the faster of the reference processes
    (one before, one after the alternatives) by MARGIN the most; none where no alternative does (the default
    stays). Beating both references keeps a change of the machine's load between processes from deciding."""
    ref = min(reference)
    chosen: dict[str, Any] = {}
    gain: dict[str, float] = {}
    for knob, options in alternatives.items():
        best = max(options.items(), key=lambda item: ref / item[1], default=None)
        if best is not None and ref / best[1] > MARGIN:
            chosen[knob], gain[knob] = best[0], statistics.median(reference) / best[1]
    return chosen, gain


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def tune(plan: Plan, knobs: Iterable[str], *, rounds: int, budget_s: float, log: Log,
         trial_batch: int | None = None, singles: bool = False) -> dict[str, Any]:
    """Measure `knobs` (those `measurable` on this plan) and decide. The decision's `knobs` hold every measured
    knob's chosen value with its speed-up over the default; `not_measured` says why a knob was left out.
    `trial_batch`: time the trials' steps at this batch instead of the run's (the quick automatic tune; the
    decision records it); `singles`: move the fused step and channels-last one at a time, not in combination."""
    wanted = list(knobs)
    todo = measurable(plan, wanted)
    started = time.monotonic()
    decision: dict[str, Any] = {"knobs": {}, "not_measured": {n: _why_not(plan, n) for n in wanted if n not in todo},
                                "trials": [], "load_average": [load_average()], "budget_s": budget_s}
    plan = _at_batch(plan, trial_batch)
    decision["trial_batch"] = plan.batch_size
    inproc = [n for n in todo if n in IN_PROCESS]
    log(f"tuning {plan.workload.name} (batch {plan.batch_size}, {plan.precision}, {plan.threads_per_rank} "
        f"thread(s)): {', '.join(inproc) or 'the reference'} in one process")
    record = run_trial(plan, _spec(inproc, plan, rounds, budget_s, singles=singles), {})
    decision["trials"].append(_summary(record, {}))
    chosen, gain = choose(record, inproc)
    defaults = {**(record.get("defaults") or {}), "allocator": record.get("allocator"), "pin_threads": "off"}
    per = [n for n in todo if n in PER_PROCESS]
    if per and time.monotonic() - started > budget_s:
        decision["not_measured"].update({n: f"the {budget_s:g} s budget was spent on the others" for n in per})
        per = []
    if per:
        best = {**{k: v for k, v in defaults.items() if k in IN_PROCESS and v != "n/a"}, **chosen}
        p_chosen, p_gain = _per_process(plan, per, _spec([], plan, rounds, budget_s, base=best), defaults, decision,
                                        log)
        chosen.update({name: defaults[name] for name in per}, **p_chosen)
        gain.update(p_gain)
    decision["knobs"] = {name: {"value": value, "speedup": round(gain.get(name, 1.0), 4), "measured": True}
                         for name, value in chosen.items() if name in todo and value is not None}
    decision["load_average"].append(load_average())
    decision.update(seconds=round(time.monotonic() - started, 1), defaults=defaults)
    return decision


def _at_batch(plan: Plan, batch: int | None) -> Plan:
    """The plan the trials run: at `batch` where that is smaller than the run's."""
    return variant(plan, batch_size=batch) if batch is not None and batch < plan.batch_size else plan


def _per_process(plan: Plan, per: list[str], spec: dict[str, Any], defaults: Mapping[str, Any],
                 decision: dict[str, Any], log: Log) -> tuple[dict[str, Any], dict[str, float]]:
    options: dict[str, list[tuple[str, str]]] = {}
    if "allocator" in per:
        options["allocator"] = [("allocator", a) for a in ALLOCATORS if a != defaults.get("allocator")]
    if "pin_threads" in per:
        options["pin_threads"] = [("pin_threads", "on")]
    log(f"tuning: {', '.join(per)}, one process each, between two reference processes")
    reference = [_median_step(_trial(plan, spec, {}, decision))]
    measured: dict[str, dict[str, float]] = {}
    for knob, alternatives in options.items():
        for name, value in alternatives:
            try:
                record = _trial(plan, spec, {name: value}, decision)
            except TrialFailed as exc:  # e.g. an allocator this image lacks
                decision["trials"].append({"process": {name: value}, "failed": str(exc)})
                continue
            measured.setdefault(knob, {})[value] = _median_step(record)
    reference.append(_median_step(_trial(plan, spec, {}, decision)))
    return choose_per_process(reference, measured)


def _trial(plan: Plan, spec: dict[str, Any], process: dict[str, str], decision: dict[str, Any]) -> dict[str, Any]:
    record = run_trial(plan, spec, process)
    decision["trials"].append(_summary(record, process))
    return record


def _summary(record: Mapping[str, Any], process: Mapping[str, str]) -> dict[str, Any]:
    """What a trial measured, for the decision's record (no raw per-step lists beyond the medians)."""
    return {"process": dict(process), "allocator": record.get("allocator"), "batch_size": record.get("batch_size"),
            "rounds": record.get("rounds"),
            "seconds": round(float(record.get("seconds") or 0), 2),
            "variants": [{"knobs": v["knobs"], "median_step_s": statistics.median(v["step_s"]),
                          "first_step_s": (v.get("warmup_s") or [None])[0], "fused": v.get("fused"),
                          "fused_bn_relu": v.get("fused_bn_relu"), "compiled": v.get("compiled")} for v in record.get("variants", [])],
            "speedups": [None if g != g else round(g, 4) for g in speedups(record)]}


def _why_not(plan: Plan, name: str) -> str:
    source = plan.knob_sources.get(name)
    if source == "asked for":
        return "asked for: not tuned"
    return _inapplicable(plan, name) or "n/a for this run"
