"""`dlrun tune`: measure the speed knobs of a run configuration on this machine and store the decision that
later runs of it use (`dlrun run` tunes by itself, within a short budget, the first time it meets one)."""
from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from dlrun.cli.options import JsonOpt, resolve, takes_plan_options
from dlrun.cli.output import console, handle_errors, print_json, warn
from dlrun.errors import UsageError

KnobsOpt = Annotated[Optional[str], typer.Option(
    "--knobs", help="Comma-separated knobs to measure: allocator, fused_optimizer, fused_bn_relu, channels_last, "
                    "threads, pin_threads, cudnn_benchmark, compile.",
    show_default="all but compile (compiling takes minutes)")]
RoundsOpt = Annotated[int, typer.Option("--rounds", help="Rounds of alternated steps per trial (at least 2; "
                                         "a knob leaves its reference only on an interval, which takes 3 or more).")]
BudgetOpt = Annotated[Optional[float], typer.Option(
    "--budget", help="Seconds of rounds after which a trial stops (after 2 rounds) and the per-process knobs are "
                     "left out.", show_default="no limit")]


@handle_errors
@takes_plan_options
def tune(knobs: KnobsOpt = None, rounds: RoundsOpt = 6, budget: BudgetOpt = None, as_json: JsonOpt = False,
         **options: Any) -> None:
    """Measure this configuration's speed knobs on this machine, keep the fastest, store the decision."""
    from dlrun.preflight import node_inventory
    from dlrun.tune.apply import measure, measures_here
    from dlrun.tune.machine_key import describe
    from dlrun.tune.search import DEFAULT_KNOBS, IN_PROCESS, PER_PROCESS

    valid = (*IN_PROCESS, *PER_PROCESS)
    wanted = [k.strip() for k in knobs.split(",") if k.strip()] if knobs else list(DEFAULT_KNOBS)
    for name in wanted:
        if name not in valid:
            from dlrun.errors import unknown_name

            raise unknown_name("knob", name, valid)
    if rounds < 2:
        raise UsageError(f"--rounds must be >= 2, got {rounds}")
    if budget is not None and not 0 < budget <= 86400:
        raise UsageError(f"--budget must be seconds from 1 to 86400, got {budget:g}")
    plan = resolve(options)
    if not plan.knob_sources:
        raise UsageError(f"workload {plan.workload.name!r} on image {plan.image.name!r} has no knobs to tune; "
                         "valid: a training workload of dlrun's PyTorch harness")
    if not measures_here(plan):
        raise UsageError(f"system {plan.system.name!r} runs on {plan.nodes} node(s) through {plan.scheduler}: "
                         "dlrun tune measures this machine; valid: run it on a compute node with --system localhost")
    from dlrun.cli.run import checked
    from dlrun.preflight import preflight

    inventory = node_inventory()
    checked(preflight(plan, inventory), skip_checks=False)  # as `dlrun run` would refuse it here
    decision = measure(plan, inventory, wanted, rounds=rounds, budget=budget or 1e9, log=warn)
    if as_json:
        print_json(decision)
        return
    _print(decision, describe(decision["fingerprint"]))


def _print(decision: dict, machine: str) -> None:
    from rich.table import Table

    table = Table(title=f"tuned on {machine} in {decision['seconds']:g} s (load average "
                        f"{_load(decision['load_average'])})")
    for column in ("knob", "default here", "chosen", "speed-up over the default"):
        table.add_column(column)
    defaults = decision.get("defaults") or {}
    for name, entry in sorted(decision["knobs"].items()):
        table.add_row(name, str(defaults.get(name, "-")), str(entry["value"]), f"{entry['speedup']:.3f}x")
    for name, why in sorted(decision.get("not_measured", {}).items()):
        table.add_row(name, str(defaults.get(name, "-")), "-", why)
    console().print(table)
    console().print(f"stored for machine {decision['fingerprint_id']} and configuration {decision['config_id']}; "
                    "runs of it with these knobs at auto use it")


def _load(values: list) -> str:
    return " -> ".join(" ".join(f"{x:.2f}" for x in v[:1]) if v else "?" for v in values)
