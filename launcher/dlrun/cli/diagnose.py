"""`dlrun diagnose`: which node or link of a set is below the others and below the site's baseline
(dlrun.diagnose says how it decides).

    dlrun diagnose [--system S] [--nodelist A,B,C | inside an allocation | the partition's nodes]
                   [--workload allreduce_probe] [--node-workload W] [--threshold 0.8] [--json] [--dry-run]

Exit codes: 0 nothing found; 1 a slow node, link or probe (or a probe that failed); 2 bad input; 130 SIGINT.
"""
from __future__ import annotations

import os
from typing import Annotated, Any, Optional

import typer

from dlrun.cli.options import DryRunOpt, JsonOpt, SkipChecksOpt
from dlrun.cli.output import console, handle_errors
from dlrun.errors import UsageError

#: The most nodes one diagnosis takes: N (N - 1) / 2 pair jobs.
MAX_NODES = 64


@handle_errors
def diagnose(
    system: Annotated[Optional[str], typer.Option("--system", "-s", help="System profile (see `dlrun systems "
                      "list`); default: as `dlrun run` chooses.", show_default=False)] = None,
    nodelist: Annotated[Optional[str], typer.Option("--nodelist", metavar="HOST,HOST,...", help=(
        "The nodes, comma-separated; default: the allocation dlrun runs in (SLURM_JOB_NODELIST, LSB_MCPU_HOSTS, "
        "PBS_NODEFILE), else every node of the partition as the scheduler lists it."), show_default=False)] = None,
    partition: Annotated[Optional[str], typer.Option("--partition", help="Batch partition/queue of the jobs "
                         "(and whose nodes are diagnosed when no --nodelist).", show_default=False)] = None,
    image: Annotated[Optional[str], typer.Option("--image", "-i", help="Image tag of the probes; default: the "
                     "system's.", show_default=False)] = None,
    workload: Annotated[str, typer.Option("--workload", help="The collective each pair of nodes runs.")]
    = "allreduce_probe",
    node_workload: Annotated[Optional[str], typer.Option("--node-workload", help=(
        "Also a short training run on every node alone (a workload, e.g. trivial), compared node with node."),
        show_default=False)] = None,
    threshold: Annotated[float, typer.Option("--threshold", help="A probe is slow below this fraction of the "
                         "reference (the median of the best quarter of its kind).")] = 0.8,
    tolerance: Annotated[float, typer.Option("--tolerance", help="The baseline's band, in percent (as "
                         "`compare --mode history`).")] = 5.0,
    last: Annotated[int, typer.Option("--last", help="The baseline: this many ok runs of each probe's key "
                    "stored before the diagnosis.")] = 10,
    as_json: JsonOpt = False,
    dry_run: DryRunOpt = False,
    skip_checks: SkipChecksOpt = False,
) -> None:
    """Run a short collective on every pair of nodes (the pairs of a round at once), optionally training on each
    node alone, and name the node or link below the others and below the site's baseline, with the evidence.
    Exit 1 when something is found."""
    from dlrun.cli.options import default_system, load_catalog
    from dlrun.diagnose import rounds
    from dlrun.results.compare.history import check_last

    if not 0 < threshold < 1:
        raise UsageError(f"bad --threshold {threshold}; valid: a fraction between 0 and 1, like 0.8")
    check_last(last)
    catalog = load_catalog()
    system = system or default_system(catalog)
    nodes, source = _nodes(catalog, system, nodelist, partition)
    common = {"system": system, "image": image, "partition": partition}
    pair_rounds = [[_job(pair, {**common, "workload": workload}) for pair in group] for group in rounds(nodes)]
    single_rounds = ([[_job((node,), {**common, "workload": node_workload}) for node in nodes]]
                     if node_workload else [])
    from dlrun.cli.run import checked
    from dlrun.preflight import preflight

    for jobs in (pair_rounds[0], *single_rounds):  # the plan's own checks, as `dlrun run` makes them
        checked(preflight(jobs[0].plan), skip_checks)
    if dry_run:
        _show_plan(nodes, source, pair_rounds + single_rounds)
        return
    _diagnose(nodes, source, pair_rounds, single_rounds, threshold=threshold, tolerance=tolerance / 100.0,
              last=last, as_json=as_json)


def _nodes(catalog, system: str, nodelist: str | None, partition: str | None) -> tuple[list[str], str]:
    """The nodes to diagnose and where they came from."""
    from dlrun.registry import SCHEDULERS

    spec = catalog.system(system)
    scheduler = SCHEDULERS.get(spec.scheduler)
    if nodelist is not None:
        nodes, source = [node.strip() for node in nodelist.split(",") if node.strip()], "--nodelist"
    elif (allocated := scheduler.allocated_nodes(os.environ)) is not None:
        nodes, source = allocated, f"this {spec.scheduler} allocation"
    else:
        view = scheduler.cluster_view()
        if view is None:
            raise UsageError(f"system {system}'s scheduler {spec.scheduler} lists no nodes here; valid: --nodelist "
                             "HOST,HOST,... (at least two)")
        wanted = partition or spec.scheduler_options.partition
        nodes = [node.name for node in view.nodes if not wanted or wanted in node.partitions]
        source = f"{view.source}" + (f", partition {wanted}" if wanted else "")
    if len(nodes) > spec.nodes:
        raise UsageError(f"{len(nodes)} nodes from {source}, but system {system} has {spec.nodes}; valid: at most "
                         f"{spec.nodes} of its nodes, or a system that describes them all")
    if not 2 <= len(set(nodes)) == len(nodes) <= MAX_NODES:
        raise UsageError(f"nodes {','.join(nodes) or '(none)'} from {source}; valid: 2 to {MAX_NODES} distinct "
                         "nodes (a pair is the smallest probe)")
    return nodes, source


def _job(nodes: tuple[str, ...], options: dict[str, Any]):
    from dlrun.cli.options import resolve
    from dlrun.diagnose.runner import Job
    from dlrun.render import render_job

    plan = resolve({**options, "nodes": len(nodes), "nodelist": ",".join(nodes), "tune": "off"})
    return Job(nodes, plan, render_job(plan))


def _show_plan(nodes: list[str], source: str, groups) -> None:
    out = console()
    out.print(f"dlrun diagnose: {len(nodes)} nodes from {source}: {', '.join(nodes)}", markup=False)
    for index, jobs in enumerate(groups, start=1):
        what = "; ".join(",".join(job.nodes) for job in jobs)
        out.print(f"round {index}: {jobs[0].plan.workload.name} on {what}", markup=False)
    out.print("the first job's script:", markup=False)
    out.print(groups[0][0].rendered.script, markup=False, highlight=False)


def _diagnose(nodes, source, pair_rounds, single_rounds, *, threshold: float, tolerance: float, last: int,
              as_json: bool) -> None:
    from dlrun.cli.store import open_store
    from dlrun.diagnose import attribute
    from dlrun.diagnose.runner import run_rounds, stamp, with_baselines
    from dlrun.paths import runs_dir

    store = open_store(before_jobs=True)
    began = stamp()
    out = console(stderr=as_json)
    out.print(f"dlrun diagnose: {len(nodes)} nodes from {source}; {sum(map(len, pair_rounds))} pair probe(s) in "
              f"{len(pair_rounds)} round(s)" + (f", {len(nodes)} single-node probe(s)" if single_rounds else ""),
              markup=False)
    pairs, stopped = run_rounds(pair_rounds, store_path=store.path, runs_root=runs_dir(),
                                finished=lambda probe: _say(out, probe))
    singles: list = []
    if single_rounds and not stopped:
        singles, stopped = run_rounds(single_rounds, store_path=store.path, runs_root=runs_dir(),
                                      finished=lambda probe: _say(out, probe))
    pairs = with_baselines(pairs, store, before=began, last=last, tolerance=tolerance)
    singles = with_baselines(singles, store, before=began, last=last, tolerance=tolerance)
    verdicts = attribute(pairs, singles, threshold)
    from dlrun.cli.diagnose_view import show

    show(nodes, pairs, singles, verdicts, as_json=as_json, threshold=threshold)
    if stopped:
        raise typer.Exit(130)
    raise typer.Exit(1 if verdicts.findings else 0)


def _say(out, probe) -> None:
    value = f"{probe.value:.4g} {probe.unit or ''}".rstrip() if probe.measured else probe.reason or "no value"
    out.print(f"  {probe.name}: {probe.status}, {value} (run {probe.run_id or '-'})", markup=False)
