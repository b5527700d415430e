"""`dlrun run` and `dlrun plan`: resolve a plan, render it, check it, execute it, store the result.

Exit codes: 0 ok; 1 the run failed, timed out or was lost; 2 bad input or refused by the pre-launch checks
(in `plan`, `--dry-run` and `run` alike); 128 + N when signal N cancelled the run (130 for Ctrl-C)."""
from __future__ import annotations

import sys
from typing import Any

import typer

from dlrun.cli.options import DryRunOpt, SkipChecksOpt, VerboseOpt, load_catalog, resolve, takes_plan_options
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


def say_if_busy(plans, out, watch=None) -> None:
    """Before a job of `plans` starts on this node (a local job): a line on `out` (the run's own output) when
    other processes keep the node busy, so that its numbers would be contended (dlrun.results.quality).
    `watch`: a look at the node begun earlier (dlrun.probe.load.NodeWatch), read now."""
    from dlrun.registry import SCHEDULERS

    if not any(SCHEDULERS.get(plan.scheduler).runs_here for plan in plans):
        return
    from dlrun.probe.load import NodeWatch
    from dlrun.results.quality import BUSY_SAMPLE_S, busy_warning

    load = (watch or NodeWatch()).load(BUSY_SAMPLE_S)
    said = busy_warning(load.others_cpus, load.cpus, load.load1)
    if said:
        out.print(f"[yellow]warning: {said}; wait for the other work to end, or run where nothing else runs[/]",
                  highlight=False)


def early_look():
    """What `dlrun run` begins before it loads its catalog, so that neither adds to its time: the look at how
    busy this node is (read just before the job starts) and this node's inventory, whose tools (`--version`,
    `ompi_info`) run in a thread meanwhile. (the watch, a function returning the inventory once it is done)"""
    import threading

    from dlrun.preflight import node_inventory
    from dlrun.probe.load import NodeWatch

    box: dict[str, Any] = {}

    def probe() -> None:
        try:
            box["inventory"] = node_inventory()
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=probe, name="dlrun-inventory", daemon=True)
    watch = NodeWatch()
    thread.start()

    def inventory() -> dict[str, Any]:
        thread.join()
        if "error" in box:
            raise box["error"]
        return box["inventory"]
    return watch, inventory


#: The early look `main` began for this process's `dlrun run`, before typer parsed its options (which takes
#: 0.3-0.5 s of its own): taken by `run`.
_EARLY: list = []


def begin_early_look(argv: list[str]) -> None:
    """Begin `early_look` for a `dlrun run` that will run a job (not --dry-run, not --help)."""
    if argv[:1] == ["run"] and not any(arg in ("--dry-run", "--help", "-h") for arg in argv[1:]):
        _EARLY.append(early_look())


@handle_errors
@takes_plan_options
def run(skip_checks: SkipChecksOpt = False, dry_run: DryRunOpt = False, verbose: VerboseOpt = False,
        **options: Any) -> None:
    """Run a workload: resolve a plan, render it, check it, execute it, store the result."""
    watch, inventory = (_EARLY.pop() if _EARLY else early_look()) if not dry_run else (None, None)
    catalog = load_catalog()
    plan = resolve(options, catalog=catalog)
    from dlrun.preflight import preflight
    from dlrun.render import render_job

    rendered = render_job(plan)
    if dry_run:
        checked(preflight(plan), skip_checks)  # the plan's own checks; this node may not be where it runs
        sys.stdout.write(rendered.script)
        return
    from dlrun.cli.store import open_store
    from dlrun.execute.prerun import clear

    store = open_store(before_jobs=True)  # a damaged store is refused before any job (a tuning trial too) runs
    # the node's checks, then the image's digest (refused, exit 1, when its copy differs from the site's lock)
    cleared = clear(plan, inventory(), lambda findings: checked(findings, skip_checks), skip_checks=skip_checks)
    from dlrun.tune import knob_decision

    # resolved again with this machine's decision on the knobs left at auto (measured first where there is none)
    tuned = (resolve(options, catalog=catalog, knob_decision=knob_decision(cleared.inventory, log=warn))
             if plan.knob_sources else plan)
    if tuned != plan:
        plan, rendered = tuned, render_job(tuned)
    execute_plan(plan, rendered, cleared, verbose=verbose, store=store, watch=watch)


#: The result formats of a site's command that report training (a batch, steps and precision mean something).
TRAINING_FORMATS = frozenset({"dlrun-result", "tf_cnn_benchmarks", "horovod", "dllogger", "mlperf", "torchtitan",
                              "megatron-lm", "nemo"})


def run_shape(plan) -> str:
    """What the run's header says it does: a storage run's passes, a site's command that measures no training
    (a latency, a bandwidth) once per rank or node, else the batch, the steps and the precision."""
    work = plan.workload
    if work.kind == "storage" and plan.data:
        return f"{plan.warmup_steps}+{plan.steps} passes over {plan.data.path}"
    if work.kind == "command" and work.result is not None and not (
            work.result.format in TRAINING_FORMATS or work.result.metric == "throughput"):
        what = f"{work.result.metric} in {work.result.unit}" if work.result.metric else f"its {work.result.format} result"
        return f"its command once per {work.run_per}, read as {what}"
    return f"batch {plan.batch_size}/rank, {plan.warmup_steps}+{plan.steps} steps, {plan.precision}"


def execute_plan(plan, rendered, cleared=None, *, verbose: bool = False, store=None, watch=None) -> None:
    import signal

    from rich.text import Text

    from dlrun.cli.progress import RunDisplay, print_summary
    from dlrun.cli.store import open_store
    from dlrun.execute import execute
    from dlrun.paths import runs_dir
    from dlrun.text import for_rich

    store = store or open_store(before_jobs=True)
    shape = run_shape(plan)
    title = (f"{plan.workload.name} ({plan.workload.label}) on {plan.system.name}: {plan.world_size} rank(s), "
             f"{shape}, image {plan.image.name}")
    console().print(Text.assemble(("dlrun", "bold"), " ", for_rich(title)))
    say_if_busy([plan], console(), watch)
    with RunDisplay(plan, verbose=verbose) as display:
        record = execute(plan, rendered, runs_root=runs_dir(), store=store, sink=display.sink, cleared=cleared)
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
