"""`dlrun run` and `dlrun plan`: resolve a plan, render it, check it, execute it, store the result.

Exit codes: 0 ok; 1 the run failed, timed out or was lost; 2 bad input or refused by the pre-launch checks
(in `plan`, `--dry-run` and `run` alike); 128 + N when signal N cancelled the run (130 for Ctrl-C)."""
from __future__ import annotations

import sys
from typing import Any

import typer

from dlrun.cli.options import DryRunOpt, SkipChecksOpt, VerboseOpt, resolve, takes_plan_options
from dlrun.cli.output import console, fail, handle_errors, print_json, warn


def said(finding, skip_checks: bool) -> str | None:
    """What a run that goes on says of a finding: a warning as it is, an error that --skip-checks passed over
    as a warning naming the check skipped (the run is not refused, so it is no error), nothing for the rest."""
    if finding.level == "warn":
        return f"warn: {finding.line()}"
    if finding.level == "error" and skip_checks:
        return f"warn: check {finding.check} skipped (--skip-checks): {finding.line()}"
    return None


def checked(findings, skip_checks: bool) -> None:
    """Refuse on an error finding (unless --skip-checks); say every warning, and the errors skipped."""
    from dlrun.preflight import refuse_on_errors

    if not skip_checks:
        refuse_on_errors(findings)
    for finding in findings:
        line = said(finding, skip_checks)
        if line:
            warn(line)


@handle_errors
@takes_plan_options
def run(skip_checks: SkipChecksOpt = False, dry_run: DryRunOpt = False, verbose: VerboseOpt = False,
        **options: Any) -> None:
    """Run a workload: resolve a plan, render it, check it, execute it, store the result."""
    plan = resolve(options)
    from dlrun.preflight import node_inventory, preflight
    from dlrun.render import render_job

    rendered = render_job(plan)
    if dry_run:
        checked(preflight(plan), skip_checks)  # the plan's own checks; this node may not be where it runs
        sys.stdout.write(rendered.script)
        return
    inventory = node_inventory()
    findings = preflight(plan, inventory)
    checked(findings, skip_checks)
    if plan.image.kind == "container":
        from dlrun.images.verify import verify_plan_image

        verify_plan_image(plan, skip_checks)  # refuses (exit 1) an image whose digest differs from the lock
    execute_plan(plan, rendered, inventory, findings, verbose=verbose)


def execute_plan(plan, rendered, inventory=None, findings=None, *, verbose: bool = False) -> None:
    import signal

    from dlrun.cli.progress import RunDisplay, print_summary
    from dlrun.cli.store import open_store
    from dlrun.execute import execute
    from dlrun.paths import runs_dir

    store = open_store()
    title = (f"{plan.workload.name} ({plan.workload.label}) on {plan.system.name}: {plan.world_size} rank(s), "
             f"batch {plan.batch_size}/rank, {plan.warmup_steps}+{plan.steps} steps, {plan.precision}, "
             f"image {plan.image.name}")
    console().print(f"[bold]dlrun[/bold] {title}")
    with RunDisplay(plan, verbose=verbose) as display:
        record = execute(plan, rendered, runs_root=runs_dir(), store=store, sink=display.sink,
                         inventory=inventory, findings=findings)
    print_summary(record)
    if record.status == "cancelled":
        raise typer.Exit(128 + (signal.Signals[record.signal] if record.signal else signal.SIGINT))
    if record.status != "ok":
        fail(f"run {record.id} {record.status}: {record.reason} (logs: {record.path})", 1)


@handle_errors
@takes_plan_options
def plan(skip_checks: SkipChecksOpt = False, **options: Any) -> None:
    """Print the resolved plan as JSON (what `run` would do, as data; secret values redacted)."""
    resolved = resolve(options)
    from dlrun.preflight import preflight

    checked(preflight(resolved), skip_checks)
    print_json(resolved.summary())
