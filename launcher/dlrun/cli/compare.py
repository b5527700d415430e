"""`dlrun compare`: stored runs against each other or against a published value, like-for-like or refused.

    dlrun compare [RUN_ID ...] [filters] [--precision P] [--batch-size N] [--nodes N] [--by AXIS] [--baseline VALUE] [--mode MODE]
                  [--reference VALUE [--unit UNIT] [--tolerance PCT] [--source TEXT] | --references FILE]
                  [--mode history [--last N] [--tolerance PCT]]
                  [--metric rate|samples-per-joule] [--allow-mismatch] [--json | --csv]

The axis picks the mode: --by system, site or host (the machine): relative throughput (Ren et al. Table III),
the only axes along which runs of different sites or machines are compared; --by devices:
speedup and scaling efficiency (PRACE guide Tables 8, 9); --by fabric: relative difference (Samsi et al.);
--by image, precision, batch, data, data-path or framework-version: regression test (Welch's t). --reference or
--references: against published values. --mode history: each run against the site's own last N ok runs of
its key (that machine's baseline: median and 95 % prediction interval). Nothing: statistics per configuration. Every estimate is a
geometric mean of the repeats, every ratio one of geometric means, with 95 % intervals from the logs
(dlrun.results.compare.stats; none below 3 repeats).
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from dlrun.cli.filters import (BatchSizeFilter, ExperimentFilter, ImageFilter, NodesFilter, PrecisionFilter,
                               SinceFilter, SiteFilter, SystemFilter, WorkloadFilter)
from dlrun.cli.output import handle_errors
from dlrun.errors import UsageError

AXIS_HELP = ("system, site, host (the machine), devices, fabric, image, framework-version, precision, batch, "
             "data or data-path (the --data directory of storage runs: Lustre against NVMe); only system, site and "
             "host let runs of different sites or machines be compared")

ToleranceOption = Annotated[float, typer.Option(
    "--tolerance", help="Tolerance of --reference, in percent: within when the 95 % interval lies inside it, "
    "outside when wholly outside, else inconclusive. With --mode history: how far from its baseline's median a "
    "run outside the baseline's interval must be to be called below (or above) it.")]
LastOption = Annotated[int, typer.Option(
    "--last", help="--mode history: how many of a key's latest ok runs, stored before the judged run, make its "
    "baseline.")]


@handle_errors
def compare(
    run_ids: Annotated[Optional[list[str]], typer.Argument(
        help="Run ids (unique prefixes are enough); with filters, runs must match both.", show_default=False)] = None,
    workload: WorkloadFilter = None, system: SystemFilter = None, image: ImageFilter = None,
    site: SiteFilter = None, experiment: ExperimentFilter = None, since: SinceFilter = None,
    precision: PrecisionFilter = None, batch_size: BatchSizeFilter = None, nodes: NodesFilter = None,
    by: Annotated[Optional[str], typer.Option("--by", help=f"Axis to compare along: {AXIS_HELP}.",
                                              show_default=False)] = None,
    baseline: Annotated[Optional[str], typer.Option(
        "--baseline", help="The axis value the others are compared with (default: the fewest devices, "
        "else the first value in order).", show_default=False)] = None,
    mode: Annotated[Optional[str], typer.Option(
        "--mode", help="summary, reference, relative, scaling, fabrics, regression or history (each run against "
        "the last --last ok runs of its key: the machine's baseline) (default: from --by).",
        show_default=False)] = None,
    reference: Annotated[Optional[float], typer.Option(
        "--reference", help="A published value to compare the selected runs with.", show_default=False)] = None,
    unit: Annotated[Optional[str], typer.Option(
        "--unit", help="Unit of --reference (default: the runs' unit).", show_default=False)] = None,
    tolerance: ToleranceOption = 5.0, last: LastOption = 10,
    source: Annotated[Optional[str], typer.Option(
        "--source", help="Where --reference comes from: 'DOCUMENT; TABLE/FIGURE; QUOTE'.", show_default=False)] = None,
    references: Annotated[Optional[Path], typer.Option(
        "--references", help="YAML or JSON file of published values (value, unit, tolerance_pct, source, "
        "match, conditions).", show_default=False)] = None,
    metric: Annotated[str, typer.Option(
        "--metric", help="What is compared: rate (throughput, or a collective's bus bandwidth) or "
        "samples-per-joule (samples in the timed window per joule measured over it, from the runs' telemetry; "
        "higher is better; runs without an energy reading are left out and counted in a note).")] = "rate",
    allow_mismatch: Annotated[bool, typer.Option(
        "--allow-mismatch", help="Compare runs that are not like-for-like; the output says so.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="CSV output: one line per row.")] = False,
) -> None:
    """Compare stored runs like-for-like: against a published value, across systems or sites, over
    device counts, between fabrics, or between image versions with a significance test. Throughputs are
    geometric means of the repeats and ratios are ratios of them, with 95 % intervals computed on the logs
    (none below 3 repeats)."""
    from dlrun.cli.compare_view import render
    from dlrun.cli.facts import efficiency_inputs
    from dlrun.cli.filters import build_filters
    from dlrun.cli.store import open_store
    from dlrun.results.compare import compare as run_compare

    if as_json and as_csv:
        raise UsageError("--json and --csv exclude each other; pick one")
    preload_statistics()
    if reference is not None and references is not None:
        raise UsageError("--reference and --references exclude each other; pick one")
    store = open_store()
    filters = build_filters(store, run_ids, workload=workload, system=system, image=image, site=site,
                            experiment=experiment, since=since, precision=precision, batch_size=batch_size,
                            nodes=nodes)
    refs = _references(reference, unit, tolerance, source, references)
    result = run_compare(store, filters, mode=mode, by=by, baseline=baseline, references=refs,
                         allow_mismatch=allow_mismatch, facts=efficiency_inputs, metric=metric, last=last,
                         tolerance=_fraction(tolerance))
    render(result, "json" if as_json else "csv" if as_csv else "table")


def _fraction(tolerance: float) -> float:
    if not 0 <= tolerance < 100:
        raise UsageError(f"--tolerance {tolerance:g}: a percentage from 0 to below 100")
    return tolerance / 100


def preload_statistics() -> None:
    """Import SciPy's t distribution (scipy.special: 0.2-0.4 s, most of it numpy) on a second thread while
    the store is read (SQLite lets go of the interpreter while it queries); the statistics' own import
    waits for this one (Python's per-module import lock), so there is nothing to join."""
    import threading

    def imports() -> None:
        try:
            import scipy.special  # noqa: F401
        except ImportError:
            pass  # said where it is used

    threading.Thread(target=imports, name="dlrun-stats-imports", daemon=True).start()


def _references(value, unit, tolerance, source, path):
    from dlrun.results.compare.reference_values import reference_from_data, references_from_data

    if path is not None:
        from dlrun.yamlfile import YamlError, load_yaml

        try:
            data = load_yaml(path, "--references")
        except YamlError as exc:
            raise UsageError(f"--references is not YAML or JSON within its bounds: {exc}") from None
        return references_from_data(data, str(path))
    if value is None:
        for name, given in (("--unit", unit), ("--source", source)):
            if given is not None:
                raise UsageError(f"{name} describes --reference; give --reference VALUE too")
        return []
    doc, _, rest = (source or "given on the command line").partition(";")
    where, _, quote = rest.partition(";")
    return [reference_from_data({"value": value, "unit": unit or "", "tolerance_pct": tolerance,
                                 "source": {"doc": doc.strip(), "where": where.strip(), "quote": quote.strip()}},
                                "--reference")]
