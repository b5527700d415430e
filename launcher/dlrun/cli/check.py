"""`dlrun check`: the nightly gate. Stored runs judged against references, one line per outcome, JUnit XML
for the CI, and exit 1 only on a regression the statistics show.

    dlrun check [RUN_ID ...] [filters] [--experiment EXP] [--newest N] [--baseline-runs N] [--tolerance PCT]
                [--junit FILE] [--json]

Each configuration's newest runs are judged against the site's references for its system in config.yaml
(`references:`), else against its baseline (the ok runs of the same key before them); with --experiment, the
experiment's published numbers too (dlrun.gate). Exit codes: 0 every outcome passed or is inconclusive (or
cannot be judged: an error in the XML); 1 a regression; 2 bad input.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from dlrun.cli.filters import (BatchSizeFilter, ImageFilter, NodesFilter, PrecisionFilter, SinceFilter, SiteFilter,
                               SystemFilter, WorkloadFilter)
from dlrun.cli.output import handle_errors


@handle_errors
def check(
    run_ids: Annotated[Optional[list[str]], typer.Argument(
        help="Run ids (unique prefixes are enough); with filters, runs must match both.", show_default=False)] = None,
    workload: WorkloadFilter = None, system: SystemFilter = None, image: ImageFilter = None,
    site: SiteFilter = None, since: SinceFilter = None, precision: PrecisionFilter = None,
    batch_size: BatchSizeFilter = None, nodes: NodesFilter = None,
    experiment: Annotated[Optional[str], typer.Option(
        "--experiment", help="Also judge this experiment's published numbers (the catalog's references), as "
        "dlrun reproduce does; selects its runs.", show_default=False)] = None,
    newest: Annotated[int, typer.Option(
        "--newest", help="Runs judged per configuration: its newest ones.")] = 3,
    baseline_runs: Annotated[int, typer.Option(
        "--baseline-runs", help="The baseline: this many ok runs of the same configuration before the newest.")] = 10,
    tolerance: Annotated[float, typer.Option(
        "--tolerance", help="The baseline's band, in percent: a regression when the 95 % interval of the ratio "
        "to the baseline lies wholly below 1 - PCT/100.")] = 5.0,
    junit: Annotated[Optional[Path], typer.Option(
        "--junit", help="Write the outcomes as JUnit XML to FILE (one test case per outcome).",
        show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")] = False,
) -> None:
    """Judge stored runs against the site's references, an experiment's published numbers or the site's
    baseline: one line per outcome (pass, regression, inconclusive with the repeats that would decide, error);
    exit 1 only on a regression, that is when the 95 % interval lies wholly below the band."""
    from dlrun.cli.compare import preload_statistics
    from dlrun.cli.filters import build_filters
    from dlrun.cli.store import open_store
    from dlrun.gate import exit_code
    from dlrun.gate.checks import Settings, run_checks, validate

    settings = Settings(newest=newest, baseline_runs=baseline_runs, tolerance=tolerance / 100.0,
                        experiment=experiment)
    validate(settings)
    preload_statistics()
    store = open_store()
    filters = build_filters(store, run_ids, workload=workload, system=system, image=image, site=site,
                            experiment=[experiment] if experiment else None, since=since, precision=precision,
                            batch_size=batch_size, nodes=nodes)
    catalog = None
    if experiment is not None:
        from dlrun.cli.options import load_catalog

        catalog = load_catalog()
    outcomes = run_checks(store, filters, settings, catalog)
    if junit is not None:
        from dlrun.gate.junit import write_junit

        write_junit(junit, outcomes)
    _show(outcomes, as_json, junit)
    raise typer.Exit(exit_code(outcomes))


def _show(outcomes, as_json: bool, junit: Path | None) -> None:
    from dlrun.cli.output import print_json
    from dlrun.gate import counts
    from dlrun.text import plain

    if as_json:
        print_json({"outcomes": [{**o.__dict__, "runs": list(o.runs)} for o in outcomes], "counts": counts(outcomes)})
        return
    for outcome in outcomes:
        print(plain(outcome.line, newlines=False))
    summary = ", ".join(f"{n} {name}" for name, n in counts(outcomes).items()) or "nothing judged"
    print(f"dlrun check: {summary}" + (f"; JUnit XML written to {plain(str(junit))}" if junit else ""))
