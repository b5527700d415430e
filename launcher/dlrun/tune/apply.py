"""A run's knobs: the stored decision for this machine, measured first where the machine has none yet
(`--tune auto`), handed to `resolve_plan` (dlrun.plan.finish), which applies it to the knobs nobody asked for.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dlrun.errors import UsageError
from dlrun.plan import Plan
from dlrun.registry import SCHEDULERS
from dlrun.tune import decisions
from dlrun.tune.machine_key import describe, fingerprint_id, machine_fingerprint
from dlrun.tune.search import AUTO_KNOBS, load_average, measurable, tune
from dlrun.tune.trial import TrialFailed

#: Seconds the automatic tuning may spend on measuring rounds (warm-up and process starts come on top).
BUDGET_ENV = "DLRUN_TUNE_BUDGET_S"
#: The 1-minute load average from which the machine counts as busy (default: its usable CPUs).
BUSY_ENV = "DLRUN_TUNE_BUSY_LOAD"
AUTO_BUDGET_S = 20.0
AUTO_ROUNDS = 8  # at least three, then as many as the budget allows: an interval to decide on
#: The batch the automatic tune times its CPU steps at, where the run's is larger: the knobs it measures
#: (fused step, channels-last, threads) change the cost of each kernel, not how it grows with the batch, and a
#: ResNet-50 step at batch 64 takes about 5 s on a 2-core node (5 variants x 3 steps at the run's batch: over a
#: minute). `dlrun tune` keeps the run's batch.
AUTO_TRIAL_BATCH = 16

Log = Callable[[str], None]


def applied(decision: Mapping[str, Any]) -> dict[str, Any]:
    """A stored decision as the plan's finishing input (dlrun.plan.finish): its knobs' values, and where it
    came from."""
    knobs = {name: entry["value"] for name, entry in decisions.checked_knobs(decision.get("knobs")).items()}
    where = {k: decision.get(k) for k in ("fingerprint_id", "config_id", "decided_at")}
    return {"knobs": knobs, "tuning": {**where, "file": str(decisions.decisions_path())}}


def measures_here(plan: Plan) -> bool:
    """Whether this machine is where the plan runs: one node, started by dlrun itself (no batch scheduler)."""
    return plan.nodes == 1 and not SCHEDULERS.get(plan.scheduler).batch


def budget_s() -> float:
    text = os.environ.get(BUDGET_ENV)
    if not text:
        return AUTO_BUDGET_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 86400:
        raise UsageError(f"bad ${BUDGET_ENV} {text!r}; valid: seconds from 1 to 86400")
    return value


def busy_load(fingerprint: Mapping[str, Any]) -> float:
    """The load average from which a measurement counts as taken on a busy machine."""
    text = os.environ.get(BUSY_ENV)
    try:
        return float(text) if text else float(fingerprint.get("usable_cpus") or 1)
    except ValueError:
        raise UsageError(f"bad ${BUSY_ENV} {text!r}; valid: a load average, e.g. 2") from None


def is_busy(fingerprint: Mapping[str, Any]) -> bool:
    load = load_average()
    return bool(load) and load[0] >= busy_load(fingerprint)


def identity(plan: Plan, inventory: Mapping[str, Any]) -> dict[str, Any]:
    """The machine's fingerprint and the run's configuration, with their ids."""
    fp = machine_fingerprint(inventory)
    cfg = decisions.run_config(plan, inventory.get("torch") if plan.image.kind == "host" else None)
    return {"fingerprint": fp, "fingerprint_id": fingerprint_id(fp), "config": cfg,
            "config_id": decisions.config_id(cfg)}


def auto_trial_batch(plan: Plan) -> int | None:
    """The smaller batch the automatic tune measures a CPU run at; None: the run's own."""
    return AUTO_TRIAL_BATCH if plan.device == "cpu" and plan.batch_size > AUTO_TRIAL_BATCH else None


def measure(plan: Plan, inventory: Mapping[str, Any], knobs: Iterable[str], *, rounds: int, budget: float,
            log: Log, previous: Mapping[str, Any] | None = None, quick: bool = False) -> dict[str, Any]:
    """Tune `knobs` now and store the decision (keeping `previous` decision's other knobs). `quick`: the
    automatic tune's short form (CPU steps at `auto_trial_batch`, each knob moved alone)."""
    knobs = list(knobs)
    who = identity(plan, inventory)
    busy = is_busy(who["fingerprint"])  # before the trials add their own load
    how = {"trial_batch": auto_trial_batch(plan), "singles": True} if quick else {}
    decision = {**who, **tune(plan, knobs, rounds=rounds, budget_s=budget, log=log, **how),
                "decided_at": decisions.now_iso(), "machine": describe(who["fingerprint"]), "busy": busy}
    kept = {name: entry for name, entry in decisions.checked_knobs((previous or {}).get("knobs")).items()
            if name not in decision["knobs"] and name not in knobs}
    decision["knobs"] = {**kept, **decision["knobs"]}
    decisions.save(decision)
    return decision


def decide(plan: Plan, inventory: Mapping[str, Any], *, log: Log) -> dict[str, Any] | None:
    """This machine's decision on the plan's knobs left at auto (dlrun.plan.finish's `knob_decision`): the stored
    one for this machine and configuration; where there is none and the plan says --tune auto, measured first
    (on this machine only). None: the defaults run."""
    who = identity(plan, inventory)
    decision = decisions.lookup(who["fingerprint_id"], who["config_id"])
    stale = decision is not None and decision.get("busy") is True and not is_busy(who["fingerprint"])
    if (decision is None or stale) and measures_here(plan) and measurable(plan, AUTO_KNOBS):
        why = ("its decision was measured on a busy machine, which is quiet now" if stale else
               f"first run of this configuration on this machine ({describe(who['fingerprint'])})")
        log(f"{why}: measuring its knobs (about {budget_s():g} s; --tune off or DLRUN_TUNE=off skips this)")
        try:
            decision = measure(plan, inventory, AUTO_KNOBS, rounds=AUTO_ROUNDS, budget=budget_s(), log=log,
                               previous=decision, quick=True)
        except TrialFailed as exc:
            log(f"tuning failed, the defaults run: {exc}")
            decisions.save({**who, "knobs": {}, "not_measured": {"all": str(exc)}, "decided_at": decisions.now_iso()})
            return None
        log("tuned: " + summary_line(decision))
    return None if decision is None else applied(decision)


def knob_decision(inventory: Mapping[str, Any], *, log: Log) -> Callable[[Plan], dict[str, Any] | None]:
    """`decide` on this node's inventory, as a plan's finishing input."""
    return lambda plan: decide(plan, inventory, log=log)


def summary_line(decision: Mapping[str, Any]) -> str:
    knobs = decisions.checked_knobs(decision.get("knobs"))
    return ", ".join(f"{name} {entry['value']}" + (f" ({entry['speedup']:.2f}x)" if entry.get("speedup", 1) != 1
                                                  else "") for name, entry in sorted(knobs.items())) or "nothing"
