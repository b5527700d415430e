"""`dlrun reproduce EXPERIMENT`: expand an experiment for a system, run the repeats the store lacks (here, one
after another, or submitted all at once to a batch scheduler), and set the results against the published
numbers.

Exit codes: 0 every run ok and no judged reference outside its tolerance (an inconclusive one is named, with
the repeats that would decide); 1 a run failed or a reference is outside its tolerance; 2 bad input or refused by the pre-launch checks; 130 interrupted (Ctrl-C): the runs
that finished are stored, and the same command continues where it stopped.
"""
from __future__ import annotations

import shlex
from typing import Annotated, Any, Optional

import typer

from dlrun.cli.experiments import ExperimentArg
from dlrun.cli.options import DryRunOpt, JsonOpt, SkipChecksOpt, VerboseOpt, _names, load_catalog
from dlrun.cli.output import console, handle_errors, print_json, warn
from dlrun.errors import UsageError
from dlrun.results.quality import MAX_REPEATS, STABLE_WITHIN

ReproduceSystemOpt = Annotated[Optional[str], typer.Option(
    "--system", "-s", help="The experiment's system to run on (needed when it has several; a dry run renders "
    "them all).", show_default=False, autocompletion=_names("systems"))]
WhereOpt = Annotated[Optional[list[str]], typer.Option(
    "--where", "-w", help="Only the points with this axis value, AXIS=VALUE (repeatable: values of one axis are "
    "alternatives, different axes must all hold).", show_default=False)]
RepeatsOpt = Annotated[Optional[int], typer.Option(
    "--repeats", help="Runs wanted per point (default: the experiment's).", show_default=False)]
ScriptOpt = Annotated[bool, typer.Option("--script", help="With --dry-run: print every point's whole script.")]
UntilStableOpt = Annotated[bool, typer.Option(
    "--until-stable", help="After the repeats, run each point again until its 95 % interval lies within "
    "--stable-within of its estimate, or it has --max-repeats runs.")]
MaxRepeatsOpt = Annotated[int, typer.Option("--max-repeats", help="With --until-stable: the most runs of a point.")]
StableWithinOpt = Annotated[float, typer.Option(
    "--stable-within", help="With --until-stable: the interval's half-width, in percent of the estimate.")]


@handle_errors
def reproduce(experiment: ExperimentArg, system: ReproduceSystemOpt = None, where: WhereOpt = None,
              repeats: RepeatsOpt = None, dry_run: DryRunOpt = False, script: ScriptOpt = False,
              skip_checks: SkipChecksOpt = False, verbose: VerboseOpt = False, as_json: JsonOpt = False,
              until_stable: UntilStableOpt = False, max_repeats: MaxRepeatsOpt = MAX_REPEATS,
              stable_within: StableWithinOpt = STABLE_WITHIN * 100) -> None:
    """Reproduce an experiment: run its points that this site lacks on this machine (other sites' runs are
    compared with, never counted), resume where an earlier run stopped, list the points a system cannot run
    with the reason, and compare with the published numbers."""
    from dlrun.cli.reproduce_view import dry_run_json, print_dry_run
    from dlrun.cli.store import open_store
    from dlrun.images.verify import with_local_image
    from dlrun.reproduce import prepare

    if script and not dry_run:
        raise UsageError("--script prints the scripts of a dry run; add --dry-run")
    if max_repeats < 1:
        raise UsageError(f"--max-repeats must be a positive integer, got {max_repeats}")
    if not 0 < stable_within < 100:
        raise UsageError(f"--stable-within is a percentage between 0 and 100, got {stable_within:g}")
    stable = (stable_within / 100, max_repeats) if until_stable else None
    store = open_store(before_jobs=not dry_run)
    spec, systems = prepare(load_catalog(), experiment, system=system, where=where or [], repeats=repeats,
                            dry_run=dry_run, local_image=with_local_image, store=store)
    if dry_run:
        if as_json:
            print_json(dry_run_json(spec, systems))
        else:
            print_dry_run(spec, systems, scripts=script)
        return
    command = shlex.join(["dlrun", "reproduce", spec.id, *(["--system", system] if system else []),
                          *[arg for value in where or [] for arg in ("--where", value)],
                          *(["--repeats", str(repeats)] if repeats else [])])
    command += " --until-stable" if until_stable else ""
    code = _run(spec, systems[0], store, skip_checks=skip_checks, verbose=verbose, as_json=as_json, command=command,
                stable=stable)
    raise typer.Exit(code)


def _checked(works: list, skip_checks: bool, every_point: bool = False) -> dict[str, Any]:
    """What the pre-run steps found for each point that will run (by point id; with `every_point`, each point
    that can run: --until-stable may run it again); refuses before anything runs."""
    from dlrun.execute.prerun import clear
    from dlrun.preflight import node_inventory

    planned = [work for work in works if work.plan is not None and (work.missing or every_point)]
    if not planned:
        return {}
    inventory = node_inventory()
    said: set[str] = set()
    verified: dict = {}  # each copy of an image is checked once
    return {work.id: clear(work.plan, inventory, _judge(work.id, skip_checks, said), verified, skip_checks=skip_checks)
            for work in planned}


def _judge(point: str, skip_checks: bool, said: set[str]):
    """Refuse on an error finding (unless --skip-checks), naming the point; say every warning, and the errors
    skipped, once per reproduce."""
    from dlrun.cli.run import said as said_of
    from dlrun.preflight import PreflightError, refuse_on_errors

    def judge(findings: list) -> None:
        if not skip_checks:
            try:
                refuse_on_errors(findings)
            except PreflightError as exc:
                raise PreflightError(f"point {point!r}: {exc}") from None
        for finding in findings:
            line = said_of(finding, skip_checks)
            if line and line not in said:
                said.add(line)
                warn(line)
    return judge


def _run(spec, system_work, store, *, skip_checks: bool, verbose: bool, as_json: bool, command: str,
         stable: tuple[float, int] | None = None) -> int:
    from dlrun.cli.reproduce_view import ReproduceDisplay, print_skipped
    from dlrun.paths import runs_dir
    from dlrun.reproduce import is_batch, run_batch, run_local, schedule

    works = system_work.works
    cleared = _checked(works, skip_checks, every_point=stable is not None)
    steps = schedule(works)
    out = console(stderr=as_json)
    stored = sum(len(work.stored) for work in works if not work.skip)
    out.print(f"[bold]dlrun reproduce[/bold] {spec.id}" + (f" on {system_work.system}" if system_work.system else "")
              + f": {len(works)} point(s), {len(system_work.skipped)} skipped; {len(steps)} run(s) to make, "
              f"{stored} already stored")
    if not as_json:
        print_skipped(works)
    report = None
    if steps:
        from dlrun.cli.run import say_if_busy

        say_if_busy([step.work.plan for step in steps if step.work.plan is not None], out)
        describe = None
        if spec.measure == "model-facts":
            from dlrun.harness import describe_model as describe
        batch = any(is_batch(step.work) for step in steps)
        with ReproduceDisplay(len(steps), verbose=verbose, stderr=as_json, follow_steps=not batch) as display:
            if batch:
                report = run_batch(steps, store_path=store.path, runs_root=runs_dir(), progress=display,
                                   cleared=cleared)
            else:
                report = run_local(steps, store_path=store.path, runs_root=runs_dir(), progress=display,
                                   describe=describe, cleared=cleared)
    if stable is not None:
        report = _until_stable(works, store, report, stable, cleared, verbose=verbose, as_json=as_json)
    return _results(spec, system_work, store, report, as_json=as_json, command=command)


def _until_stable(works, store, report, stable, cleared, *, verbose: bool, as_json: bool):
    """Rounds of one more run of each point whose interval is still wide (dlrun.reproduce.stable), while none
    fails and nothing interrupts."""
    from dlrun.cli.reproduce_view import ReproduceDisplay
    from dlrun.paths import runs_dir
    from dlrun.reproduce import RunReport, is_batch, run_batch, run_local
    from dlrun.reproduce.stable import more_repeats

    report = report or RunReport()
    within, most = stable
    while not report.interrupted and all(o.status == "ok" for o in report.outcomes):
        for work in works:
            work.refresh(store)
        steps = more_repeats(works, within, most)
        if not steps:
            break
        console(stderr=as_json).print(f"until stable: {len(steps)} more run(s), one per point whose interval is "
                                      f"wider than ±{within * 100:g} %", highlight=False)
        batch = any(is_batch(step.work) for step in steps)
        with ReproduceDisplay(len(steps), verbose=verbose, stderr=as_json, follow_steps=not batch) as display:
            run = run_batch if batch else run_local
            more = run(steps, store_path=store.path, runs_root=runs_dir(), progress=display, cleared=cleared)
        report.outcomes += more.outcomes
        report.not_run += more.not_run
        report.interrupted = more.interrupted
    return report


def _results(spec, system_work, store, report, *, as_json: bool, command: str) -> int:
    from dlrun.cli.compare_view import print_table
    from dlrun.cli.facts import efficiency_inputs
    from dlrun.cli.reproduce_view import print_points, print_references
    from dlrun.reproduce import compare_points, compare_references, point_summary

    for work in system_work.works:
        work.refresh(store)
    summaries = [point_summary(work) for work in system_work.works if not work.skip]
    references = compare_references(spec, system_work.works, system_work.system)
    comparisons = compare_points(store, spec, system_work.works, facts=efficiency_inputs)
    outcomes = report.outcomes if report else []
    failed = [o for o in outcomes if o.status not in ("ok", "cancelled")]
    if as_json:
        print_json(_results_json(spec, system_work, report, summaries, references, comparisons))
    else:
        if summaries and spec.measure != "model-facts":  # model facts: the references table says it all
            print_points(spec, system_work, summaries)
        for comparison in comparisons:
            print_table(comparison)
        print_references(references)
    if report and report.interrupted:
        stored = sum(1 for o in outcomes if o.status == "ok")
        warn(f"interrupted: {stored} run(s) of this reproduce are stored; `{command}` continues where it stopped")
        return 130
    if failed:
        warn(f"{len(failed)} run(s) failed: " + "; ".join(f"{o.step.work.id}: {o.reason}" for o in failed[:3]))
    outside = _say_verdicts(references)
    return 1 if failed or outside else 0


def _results_json(spec, system_work, report, summaries, references, comparisons) -> dict:
    from dlrun.cli.reproduce_view import references_json

    return {"experiment": spec.id, "system": system_work.system, "interrupted": bool(report and report.interrupted),
            "runs": [{"point": o.step.work.id, "repeat": o.step.repeat, "run_id": o.run_id,
                      "status": o.status, "reason": o.reason, "values": o.values}
                     for o in (report.outcomes if report else [])],
            "not_run": [{"point": step.work.id, "repeat": step.repeat, "why": why}
                        for step, why in (report.not_run if report else [])],
            "points": summaries, "skipped": [{"point": w.id, "why": w.skip} for w in system_work.skipped],
            "references": references_json(references),
            "comparisons": [comparison.to_dict() for comparison in comparisons]}


def _say_verdicts(references: list) -> bool:
    """Name the references outside their tolerance (a failure) and the inconclusive ones (not one: more
    repeats decide, about as many as the largest estimate); whether any is outside."""
    outside = [row for row in references if row.verdict == "outside"]
    if outside:
        warn(f"{len(outside)} reference(s) outside their tolerance: " + ", ".join(r.reference.id for r in outside))
    inconclusive = [row for row in references if row.verdict == "inconclusive"]
    if inconclusive:
        needed = max((row.repeats_needed or 0 for row in inconclusive), default=0)
        more = f"; about {needed} repeats per point would decide (--repeats {needed})" if needed else ""
        warn(f"{len(inconclusive)} reference(s) inconclusive, their interval not yet inside or outside the "
             f"tolerance band: {', '.join(r.reference.id for r in inconclusive)}{more}")
    return bool(outside)
