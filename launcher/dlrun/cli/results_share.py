"""`dlrun results export|import|import-log`: results that leave this site or come into it.

    dlrun results export [RUN_ID ...] [filters] --out FILE [--format bundle|csv|jsonl|parquet]
                         [--with-logs] [--sign KEY] [--exporting-site NAME]
    dlrun results import BUNDLE [--allowed-signers FILE | --unsigned]
    dlrun results import-log FILE --system SYSTEM [--format FORMAT] [--site SITE] [--machine here|RUN_ID]
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


def _store():
    from dlrun.paths import store_path
    from dlrun.results.store import Store

    return Store(store_path())


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
    from dlrun.results.export import export_bundle, export_table, format_of

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
        print(f"wrote {out}: {rows} rows ({chosen})")
        return
    from dlrun.results.bundle_sign import sign as ssh_sign
    from dlrun.results.site import local_site

    name = _site_name(exporting_site, "--exporting-site") if exporting_site else local_site()
    signer = (lambda manifest: ssh_sign(manifest, sign)) if sign is not None else None
    written = export_bundle(store, filters, out, site=name, dlrun_version=__version__, with_logs=with_logs,
                            sign=signer)
    logs = f", {written.files} run-directory files" if with_logs else ""
    print(f"wrote {written.path}: {written.runs} runs from site {name}{logs}, {_size(written.size)}, "
          f"{'signed with ' + str(sign) if written.signed else 'unsigned'}; sha256 {written.sha256}")


@handle_errors
def import_(
    bundle: Annotated[Path, typer.Argument(help="A bundle written by `dlrun results export`.", show_default=False)],
    allowed_signers: Annotated[Optional[Path], typer.Option(
        "--allowed-signers", help="Verify the signature against this allowed-signers file (ssh-keygen(1)); "
        "default: allowed_signers in config.yaml.", show_default=False)] = None,
    unsigned: Annotated[bool, typer.Option(
        "--unsigned", help="Import a bundle nobody signed (or without checking its signature).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Verify a bundle (every member's sha256, and its signature) and store the runs this site lacks."""
    from dlrun.paths import dlrun_home
    from dlrun.results.bundle_import import import_bundle

    result = import_bundle(_store(), bundle, dlrun_home(), allowed_signers=allowed_signers, unsigned=unsigned)
    if as_json:
        print_json({"site": result.site, "sha256": result.sha256, "signer": result.signer, "runs": result.runs,
                    "added": result.added, "skipped": result.skipped})
        return
    who = f"signed by {result.signer}, verified" if result.signer else "not verified (--unsigned)"
    kept = f"; {len(result.skipped)} stored already" if result.skipped else ""
    print(f"imported {len(result.added)} of {result.runs} runs from site {result.site} ({who}){kept}")


@handle_errors
def import_log(
    file: Annotated[Path, typer.Argument(help="A benchmark log (see `dlrun parse`).", show_default=False)],
    system: Annotated[str, typer.Option("--system", "-s", help="The system the log was produced on.",
                                        show_default=False)] = ...,
    fmt: Annotated[Optional[str], typer.Option(
        "--format", help="The log's format (default: detected): dlrun-harness, nccl-tests, tf_cnn_benchmarks, "
        "horovod, dllogger, mllog.", show_default=False)] = None,
    site: Annotated[Optional[str], typer.Option(
        "--site", help="The site the log was produced at (default: this site).", show_default=False)] = None,
    machine: Annotated[Optional[str], typer.Option(
        "--machine", help="The machine the log was produced on: `here` (this node) or a stored run's id (its "
        "site and machine); without it the machine is unknown and matches nothing.", show_default=False)] = None,
    as_json: JsonOpt = False,
) -> None:
    """Store the results of another tool's log as runs (origin import-log); a log imported before adds nothing."""
    from dlrun.cli.machine import machine_of, with_machine
    from dlrun.results.import_log import import_log as records_of
    if not system.strip():
        raise UsageError("--system must name the system the log was produced on, e.g. --system dgx2")
    store = _store()
    site = _site_name(site, "--site") if site else None
    site, fingerprint = machine_of(machine, store, site) if machine is not None else (site, None)
    pairs = with_machine(records_of(file.resolve(), system=system, fmt=fmt, site=site), site, fingerprint)
    added = store.add_runs(pairs, same_provenance=("log_sha256", "log_result_index"))
    if as_json:
        print_json({"added": added, "results": len(pairs)})
        return
    if not added:
        print(f"nothing added: {file} (sha256 {pairs[0][0]['provenance']['log_sha256'][:12]}...) is stored already")
        return
    states = ", ".join(f"{run['id']} ({run['status']})" for run, _ in pairs if run["id"] in added)
    print(f"imported {len(added)} run{'s' if len(added) != 1 else ''} from {file}: {states}")
