"""`dlrun results export|import|import-log|copy`: results that leave this site or come into it, or move between
its stores.

    dlrun results export [RUN_ID ...] [filters] --out FILE [--format bundle|csv|jsonl|parquet]
                         [--with-logs] [--sign KEY] [--exporting-site NAME]
    dlrun results import BUNDLE [--allowed-signers FILE | --unsigned]
    dlrun results copy SOURCE
    dlrun results import-log FILE --system SYSTEM [--format FORMAT] [--site SITE] [--machine here|RUN_ID]
                             [--workload W | --model M] [--image I] [--precision P] [--batch-size B]
                             [--nodes N] [--ranks-per-node R] [--fabric F] [--experiment E]
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from dlrun.cli.filters import (ExperimentFilter, ImageFilter, SinceFilter, SiteFilter, StatusFilter, SystemFilter,
                               WorkloadFilter, build_filters)
from dlrun.cli.options import JsonOpt
from dlrun.cli.output import handle_errors, print_json
from dlrun.errors import UsageError
from dlrun.text import plain


def _store():
    from dlrun.cli.store import open_store

    return open_store()


def _site_name(value: str, option: str) -> str:
    from dlrun.results.site import SITE_PATTERN

    if not SITE_PATTERN.match(value):
        raise UsageError(f"bad {option} {value!r}; valid: letters, digits and . _ + - (starting with a letter or "
                         "digit, at most 100 characters)")
    return value


def _size(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


@handle_errors
def export(
    run_ids: Annotated[Optional[list[str]], typer.Argument(
        help="Run ids (unique prefixes are enough); with filters, runs must match both.", show_default=False)] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="The file to write.", show_default=False)] = ...,
    fmt: Annotated[Optional[str], typer.Option(
        "--format", help="bundle (for another site: runs, provenance, key, manifest), or a flat table: csv, "
        "jsonl, parquet (default: from --out's suffix, else bundle).", show_default=False)] = None,
    with_logs: Annotated[bool, typer.Option("--with-logs", help="Bundle: carry each run directory's files.")] = False,
    sign: Annotated[Optional[Path], typer.Option(
        "--sign", help="Bundle: sign it with this SSH private key (ssh-keygen -Y sign).", show_default=False)] = None,
    exporting_site: Annotated[Optional[str], typer.Option(
        "--exporting-site", help="Bundle: the name of this site (default: DLRUN_SITE, config.yaml, host domain).",
        show_default=False)] = None,
    workload: WorkloadFilter = None, system: SystemFilter = None, image: ImageFilter = None,
    status: StatusFilter = None, since: SinceFilter = None, experiment: ExperimentFilter = None,
    site: SiteFilter = None,
) -> None:
    """Write stored runs to one file: a bundle another site imports (signed with --sign), or a flat table."""
    from dlrun import __version__
    from dlrun.results.exchange.export import export_bundle, export_table, format_of

    chosen = format_of(out, fmt)
    if chosen != "bundle":
        for option, given in (("--with-logs", with_logs), ("--sign", sign), ("--exporting-site", exporting_site)):
            if given:
                raise UsageError(f"{option} applies to bundles, not to --format {chosen}")
    store = _store()
    filters = build_filters(store, run_ids, workload=workload, system=system, image=image, status=status,
                            since=since, experiment=experiment, site=site)
    if chosen != "bundle":
        rows = export_table(store, filters, out, chosen)
        print(plain(f"wrote {out}: {rows} rows ({chosen})"))
        return
    from dlrun.results.exchange.bundle_sign import sign as ssh_sign
    from dlrun.results.site import local_site

    name = _site_name(exporting_site, "--exporting-site") if exporting_site else local_site()
    signer = (lambda manifest: ssh_sign(manifest, sign)) if sign is not None else None
    written = export_bundle(store, filters, out, site=name, dlrun_version=__version__, with_logs=with_logs,
                            sign=signer)
    logs = f", {written.files} run-directory files" if with_logs else ""
    print(plain(f"wrote {written.path}: {written.runs} runs from site {name}{logs}, {_size(written.size)}, "
                f"{'signed with ' + str(sign) if written.signed else 'unsigned'}; sha256 {written.sha256}"))


@handle_errors
def import_(
    bundle: Annotated[Path, typer.Argument(help="A bundle written by `dlrun results export`.", show_default=False)],
    allowed_signers: Annotated[Optional[Path], typer.Option(
        "--allowed-signers", help="Verify the signature against this allowed-signers file (ssh-keygen(1)); "
        "default: allowed_signers in config.yaml.", show_default=False)] = None,
    unsigned: Annotated[bool, typer.Option(
        "--unsigned", help="Import a bundle nobody signed (or without checking its signature); refused where "
        "config.yaml names allowed signers.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Verify a bundle (every member's sha256, and its signature) and store the runs this site lacks, within
    the limits in config.yaml (see docs/results.md: Limits)."""
    from dlrun.paths import dlrun_home
    from dlrun.results.exchange.bundle_import import import_bundle

    result = import_bundle(_store(), bundle, dlrun_home(), allowed_signers=allowed_signers, unsigned=unsigned)
    if as_json:
        print_json({"site": result.site, "sha256": result.sha256, "signer": result.signer, "runs": result.runs,
                    "added": result.added, "skipped": result.skipped})
        return
    who = f"signed by {result.signer}, verified" if result.signer else "not verified (--unsigned)"
    kept = f"; {len(result.skipped)} stored already" if result.skipped else ""
    print(plain(f"imported {len(result.added)} of {result.runs} runs from site {result.site} ({who}){kept}"))


@handle_errors
def copy(
    source: Annotated[str, typer.Argument(help="The store to copy from: an SQLite file (results.sqlite), or a "
                                               "PostgreSQL store's URL postgresql://USER@HOST[:PORT]/DATABASE "
                                               "(its password in PGPASSWORD or ~/.pgpass).", show_default=False)],
    as_json: JsonOpt = False,
) -> None:
    """Copy every run of another store into this site's store (config.yaml's `store:`, else the SQLite file), as
    stored there: how a site moves its store between SQLite and PostgreSQL. Runs stored already are skipped."""
    from dlrun.results.store import Store
    from dlrun.results.store.location import is_postgres, parse_store
    from dlrun.results.store.transfer import copy_runs

    target = _store()
    origin = Store(parse_store(source, "the command line") if is_postgres(source) or "://" in source
                   else Path(source))
    if not origin.exists():
        raise UsageError(f"no store at {source!r}; valid: an SQLite store file, or postgresql://USER@HOST/DATABASE")
    if str(origin.path) == str(target.path):
        raise UsageError(f"{str(origin.path)!r} is this site's store itself; valid: the other store")
    origin.check()
    added, held = copy_runs(origin, target)
    if as_json:
        print_json({"from": str(origin.path), "to": str(target.path), "runs": held, "added": added})
        return
    kept = f"; {held - len(added)} stored already" if held > len(added) else ""
    print(plain(f"copied {len(added)} of {held} runs from {origin.path} to {target.path}{kept}"))


WorkloadOpt = Annotated[Optional[str], typer.Option(
    "--workload", "-w", help="The dlrun workload the log ran (see `dlrun workloads list`): the run is stored as a "
    "dlrun run of it, with the comparability key such a run gets.", show_default=False)]
ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", help="The model the log trained, in dlrun's (tf_cnn_benchmarks') names; picks the workload when "
    "--workload is not given.", show_default=False)]
ImportImageOpt = Annotated[Optional[str], typer.Option(
    "--image", "-i", help="The image the log ran in (needed with --workload or --model).", show_default=False)]
ImportPrecisionOpt = Annotated[Optional[str], typer.Option(
    "--precision", help="fp32 or amp, where the log does not say it.", show_default=False)]
ImportFabricOpt = Annotated[Optional[str], typer.Option(
    "--fabric", help="The fabric between the nodes (needed for a log of several nodes).", show_default=False)]
ImportBatchOpt = Annotated[Optional[int], typer.Option(
    "--batch-size", "-b", help="Batch per device, where the log does not say it.", show_default=False)]
ImportNodesOpt = Annotated[Optional[int], typer.Option(
    "--nodes", "-N", help="Nodes, where the log does not name its hosts.", show_default=False)]
ImportRanksOpt = Annotated[Optional[int], typer.Option(
    "--ranks-per-node", "-r", help="Ranks (devices) per node, where the log does not say it.", show_default=False)]
ImportExperimentOpt = Annotated[Optional[str], typer.Option(
    "--experiment", help="Tag the run with this experiment and the point it is a run of (with --workload), so "
    "that it counts for that point.", show_default=False)]


@handle_errors
def import_log(
    file: Annotated[Path, typer.Argument(help="A benchmark log (see `dlrun parse`).", show_default=False)],
    system: Annotated[str, typer.Option("--system", "-s", help="The system the log was produced on (a catalog "
                                        "system with --workload).", show_default=False)] = ...,
    fmt: Annotated[Optional[str], typer.Option(
        "--format", help="The log's format (default: detected): dlrun-harness, nccl-tests, tf_cnn_benchmarks, "
        "horovod, dllogger, mllog.", show_default=False)] = None,
    site: Annotated[Optional[str], typer.Option(
        "--site", help="The site the log was produced at (default: this site).", show_default=False)] = None,
    machine: Annotated[Optional[str], typer.Option(
        "--machine", help="The machine the log was produced on: `here` (this node) or a stored run's id (its "
        "site and machine); without it the machine is unknown and matches nothing.", show_default=False)] = None,
    workload: WorkloadOpt = None, model: ModelOpt = None, image: ImportImageOpt = None,
    precision: ImportPrecisionOpt = None, fabric: ImportFabricOpt = None, batch_size: ImportBatchOpt = None,
    nodes: ImportNodesOpt = None, ranks_per_node: ImportRanksOpt = None, experiment: ImportExperimentOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Store the results of another tool's log as runs (origin import-log); a log imported before adds nothing.

    With --workload (or --model) the run is stored as a dlrun run of that workload: the options say what the
    log does not (image; batch, precision, nodes where it is silent; fabric across nodes), are checked as
    `dlrun run` checks them, and must agree with what the log says. --machine says which machine it ran on."""
    from dlrun.cli.machine import machine_of
    from dlrun.results.exchange.import_plan import ImportOptions

    if not system.strip():
        raise UsageError("--system must name the system the log was produced on, e.g. --system dgx2")
    options = ImportOptions(workload=workload, model=model, image=image, precision=precision, fabric=fabric,
                            batch_size=batch_size, nodes=nodes, ranks_per_node=ranks_per_node)
    origin = _site_name(site, "--site") if site else None
    store = _store()
    origin, fingerprint = machine_of(machine, store, origin) if machine is not None else (origin, None)
    if options.given() or experiment:
        pairs = _as_dlrun_runs(file.resolve(), system, options, fmt, (origin, fingerprint), experiment, store)
    else:
        from dlrun.cli.machine import with_machine
        from dlrun.results.exchange.import_log import import_log as records_of

        pairs = with_machine(records_of(file.resolve(), system=system, fmt=fmt, site=origin), origin, fingerprint)
    added = store.add_runs(pairs, same_provenance=("log_sha256", "log_result_index"))
    if as_json:
        print_json({"added": added, "results": len(pairs),
                    "runs": [{"id": run["id"], "status": run["status"], "workload": run["workload"],
                              "experiment": run.get("experiment"), "point": run.get("point")} for run, _ in pairs]})
        return
    if not added:
        digest = pairs[0][0]["provenance"]["log_sha256"][:12]
        print(plain(f"nothing added: {file} (sha256 {digest}...) is stored already"))
        return
    states = ", ".join(f"{run['id']} ({run['status']}{_as_what(run)})" for run, _ in pairs if run["id"] in added)
    print(plain(f"imported {len(added)} run{'s' if len(added) != 1 else ''} from {file}: {states}"))


def _as_dlrun_runs(path: Path, system: str, options, fmt: Optional[str], machine: tuple, experiment: Optional[str],
                   store):
    """(run, rows) pairs in the shape of dlrun runs of the options' workload, on `machine` (site, fingerprint),
    tagged with the experiment's point."""
    from dlrun.cli.machine import with_machine
    from dlrun.cli.options import load_catalog
    from dlrun.images.verify import with_local_image
    from dlrun.results.exchange.import_log import import_log_as_runs
    from dlrun.results.key import key_from_run

    if experiment is not None and options.workload is None and options.model is None:
        raise UsageError(f"--experiment {experiment} counts the log for one of its points; name the workload the "
                         "log ran with --workload NAME (or --model NAME), and its --image")
    catalog = load_catalog()
    site, fingerprint = machine
    imported = import_log_as_runs(path, catalog=catalog, system=system, options=options, fmt=fmt, site=site,
                                  local_image=with_local_image)
    machined = with_machine([(run, rows) for run, rows, _ in imported], site, fingerprint)
    found = [(run, rows, plan) for (run, rows), (_, _, plan) in zip(machined, imported)]
    if experiment is not None:
        from dlrun.reproduce.imported import point_of

        for run, rows, plan in found:
            run.update(experiment=experiment, point=point_of(catalog, experiment, plan, key_from_run(run, rows),
                                                             store=store, local_image=with_local_image))
    return [(run, rows) for run, rows, _ in found]


def _as_what(run: dict) -> str:
    if run["plan"].get("origin") == "import-log":  # stored the old way: the log's format, no plan
        return ""
    point = f", experiment {run['experiment']} point {run['point']}" if run.get("experiment") else ""
    trains = f", batch {run['batch_size']}, {run['precision']}" if run["batch_size"] else ""
    return (f": {run['workload']} on {run['system']}, image {run['image']}, {run['world_size']} device(s) on "
            f"{run['nodes']} node(s){trains}{point}")
