"""`dlrun run` and `dlrun plan`: resolve a plan, render it, check it, execute it, store the result."""
from __future__ import annotations

import sys

import typer

from dlrun.cli.options import (AccountOpt, AllocatorOpt, BatchOpt, BindOpt, DataOpt, DataWorkersOpt, DryRunOpt,
                               EnvOpt, ExclusiveOpt, FabricOpt, GlobalBatchOpt, ImageOpt, LauncherArgOpt, LauncherOpt,
                               NodesOpt, PartitionOpt, PrecisionOpt, RanksOpt, RuntimeOpt, SchedulerOpt,
                               SkipChecksOpt, StepsOpt, SystemOpt, ThreadsOpt, TimeOpt, VerboseOpt, WarmupOpt,
                               Workload, resolve)
from dlrun.cli.output import console, fail, handle_errors, print_json, warn


@handle_errors
def run(workload: Workload, image: ImageOpt = None, system: SystemOpt = "localhost", nodes: NodesOpt = None,
        ranks_per_node: RanksOpt = None, batch_size: BatchOpt = None, global_batch_size: GlobalBatchOpt = None,
        steps: StepsOpt = None, warmup_steps: WarmupOpt = None, precision: PrecisionOpt = "fp32",
        threads: ThreadsOpt = None, launcher: LauncherOpt = None, runtime: RuntimeOpt = None,
        scheduler: SchedulerOpt = None, fabric: FabricOpt = None, data: DataOpt = None, bind: BindOpt = None,
        env: EnvOpt = None, data_workers: DataWorkersOpt = None, allocator: AllocatorOpt = "auto",
        partition: PartitionOpt = None, account: AccountOpt = None, time: TimeOpt = None,
        exclusive: ExclusiveOpt = None, launcher_arg: LauncherArgOpt = None, skip_checks: SkipChecksOpt = False,
        dry_run: DryRunOpt = False, verbose: VerboseOpt = False) -> None:
    """Run a workload: resolve a plan, render it, check it, execute it, store the result."""
    plan = resolve(locals())
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
def plan(workload: Workload, image: ImageOpt = None, system: SystemOpt = "localhost", nodes: NodesOpt = None,
         ranks_per_node: RanksOpt = None, batch_size: BatchOpt = None, global_batch_size: GlobalBatchOpt = None,
         steps: StepsOpt = None, warmup_steps: WarmupOpt = None, precision: PrecisionOpt = "fp32",
         threads: ThreadsOpt = None, launcher: LauncherOpt = None, runtime: RuntimeOpt = None,
         scheduler: SchedulerOpt = None, fabric: FabricOpt = None, data: DataOpt = None, bind: BindOpt = None,
         env: EnvOpt = None, data_workers: DataWorkersOpt = None, allocator: AllocatorOpt = "auto",
         partition: PartitionOpt = None, account: AccountOpt = None, time: TimeOpt = None,
         exclusive: ExclusiveOpt = None, launcher_arg: LauncherArgOpt = None) -> None:
    """Print the resolved plan as JSON (what `run` would do, as data)."""
    print_json(resolve(locals()).summary())
