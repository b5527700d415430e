"""`dlrun run` and `dlrun plan`: resolve a plan, render it, check it, execute it, store the result."""
from __future__ import annotations

import sys
from typing import Any

import typer

from dlrun.cli.options import DryRunOpt, SkipChecksOpt, VerboseOpt, resolve, takes_plan_options
from dlrun.cli.output import console, fail, handle_errors, print_json, warn


@handle_errors
@takes_plan_options
def run(skip_checks: SkipChecksOpt = False, dry_run: DryRunOpt = False, verbose: VerboseOpt = False,
        **options: Any) -> None:
    """Run a workload: resolve a plan, render it, check it, execute it, store the result."""
    plan = resolve(options)
    from dlrun.preflight import node_inventory, preflight, refuse_on_errors
    from dlrun.render import render_job

    rendered = render_job(plan)
    if dry_run:
        for finding in preflight(plan):  # static: the profile's declared host MPI against the image
            if finding.level != "ok":
                warn(f"{finding.level}: {finding.line()}")
        sys.stdout.write(rendered.script)
        return
    inventory = node_inventory()
    findings = preflight(plan, inventory)
    if not skip_checks:
        refuse_on_errors(findings)
    for finding in findings:
        if finding.level == "warn" or (finding.level == "error" and skip_checks):
            warn(f"{finding.level}: {finding.line()}")
    if plan.image.kind == "container":
        from dlrun.images.verify import verify_plan_image

        verify_plan_image(plan)  # refuses (exit 1) an image whose digest differs from the site's lock
    execute_plan(plan, rendered, inventory, findings, verbose=verbose)


def execute_plan(plan, rendered, inventory=None, findings=None, *, verbose: bool = False) -> None:
    from dlrun.cli.progress import RunDisplay, print_summary
    from dlrun.execute import execute
    from dlrun.paths import runs_dir, store_path
    from dlrun.results.store import Store

    title = (f"{plan.workload.name} ({plan.workload.label}) on {plan.system.name}: {plan.world_size} rank(s), "
             f"batch {plan.batch_size}/rank, {plan.warmup_steps}+{plan.steps} steps, {plan.precision}, "
             f"image {plan.image.name}")
    console().print(f"[bold]dlrun[/bold] {title}")
    with RunDisplay(plan, verbose=verbose) as display:
        record = execute(plan, rendered, runs_root=runs_dir(), store=Store(store_path()), sink=display.sink,
                         inventory=inventory, findings=findings)
    print_summary(record)
    if record.status == "cancelled":
        raise typer.Exit(130)
    if record.status != "ok":
        fail(f"run {record.id} {record.status}: {record.reason} (logs: {record.path})", 1)


@handle_errors
@takes_plan_options
def plan(**options: Any) -> None:
    """Print the resolved plan as JSON (what `run` would do, as data)."""
    print_json(resolve(options).summary())
