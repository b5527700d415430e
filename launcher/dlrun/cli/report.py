"""`dlrun report`: stored runs as one self-contained HTML page with PNG plots, written into a folder.

    dlrun report [RUN_ID ...] [--experiment E] [filters] --out DIR [--baseline SYSTEM] [--title TEXT]
                 [--allow-mismatch]

The filters are those of `dlrun results list`. The page holds throughput against devices on log-log axes
with ideal scaling (Ren et al. Fig. 4), bars per fabric or system (Samsi et al. Fig. 4), both with each
point's repeats beside its geometric mean and 95 % interval, the speedup and
scaling-efficiency table with 95 % intervals (PRACE guide Tables 8 and 9), systems relative to a baseline
(Ren et al. Table III), an experiment's published numbers beside the measured ones, and every run's
provenance, linked from each point, and each point's quality verdict. A table that would pool runs of
different sites or machines is refused (exit 1, naming each differing field) unless --allow-mismatch; other
differences are reported with a box listing them.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Optional

import typer

from dlrun.cli.filters import (ExperimentFilter, ImageFilter, SinceFilter, SiteFilter, StatusFilter, SystemFilter,
                               WorkloadFilter)
from dlrun.cli.output import console, handle_errors
from dlrun.text import for_rich


def early_painter(argv: list[str]):
    """For `dlrun report` (not its --help), the plotting process forked before the command line is even
    parsed (main() hands it to the command): it imports matplotlib while typer parses and the store is
    read (0.2 s earlier than from the command's body). None for any other command."""
    if argv[:1] != ["report"] or {"--help", "-h"} & set(argv):
        return None
    from dlrun.report import Painter

    return Painter()


@handle_errors
def report(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write index.html and its PNG plots into "
                                      "(new, empty, or an earlier report, which is replaced).",
                                      show_default=False)],
    run_ids: Annotated[Optional[list[str]], typer.Argument(
        help="Run ids (unique prefixes are enough); with filters, runs must match both.", show_default=False)] = None,
    workload: WorkloadFilter = None, system: SystemFilter = None, image: ImageFilter = None,
    status: StatusFilter = None, site: SiteFilter = None, experiment: ExperimentFilter = None,
    since: SinceFilter = None,
    baseline: Annotated[Optional[str], typer.Option(
        "--baseline", help="The system the others are compared with (default: the first in order).",
        show_default=False)] = None,
    title: Annotated[Optional[str], typer.Option("--title", help="The page's title.", show_default=False)] = None,
    allow_mismatch: Annotated[bool, typer.Option(
        "--allow-mismatch", help="Report runs of different sites or machines in one table; the page says they "
        "are not like-for-like.")] = False,
) -> None:
    """Write an HTML report with plots of stored runs: scaling, systems and fabrics compared (geometric
    means with 95 % intervals, the repeats drawn beside them), published numbers beside the measured ones
    with their verdicts (an experiment of counted model facts: counted against published), the runs' energy
    (J, per sample, samples/J, mean power) and per point power and utilisation over time per device from
    its telemetry and its newest run's per-rank step times, each point's runs and provenance a click away."""
    from dlrun.cli.facts import efficiency_inputs
    from dlrun.cli.filters import build_filters
    from dlrun.cli.store import open_store
    from dlrun.report import Painter, check_out, gather, write

    check_out(out)
    # forked before the store is read (by main(), or here): it imports matplotlib meanwhile, then draws
    early = (ctx.obj or {}).get("painter")
    with early if early is not None else Painter() as painter:
        _preload()
        store = open_store()
        specs = _experiments(store, experiment or [])
        filters = build_filters(store, run_ids, workload=workload, system=system, image=image, status=status,
                                site=site, experiment=experiment, since=since)
        given = [("--workload", workload), ("--system", system), ("--image", image), ("--status", status),
                 ("--site", site), ("--experiment", experiment), ("--since", [since] if since else None)]
        selection = shlex.join([*(run_ids or []), *(arg for name, values in given for value in values or []
                                                    for arg in (name, value))]) or "every stored run"
        heading = title or ("dlrun report: " + (", ".join(spec.title for spec in specs) if specs
                                              else ", ".join(workload or []) or "stored runs"))
        # an experiment's report may hold counted facts only (Table II): its published numbers are the report
        result = gather(store, filters, title=heading, selection=selection, baseline=baseline,
                        facts=efficiency_inputs, measured_only=not specs)
        _refuse_pooled(result, allow_mismatch)
        if specs:
            from dlrun.cli.options import load_catalog
            from dlrun.report.published import add_published

            catalog = load_catalog()
            for spec in specs:
                add_published(result, catalog, catalog.experiment(spec.id), store)
            _something_to_report(result)
        written = write(result, out, store.path, painter)  # its tables import pandas: waits for the thread
    flag = "" if result.like_for_like else f" (not like-for-like: {len(result.differences)} difference(s))"
    console().print(for_rich(f"wrote {written / 'index.html'}: {result.runs_total} run(s), "
                             f"{len(result.points)} point(s){_published_count(result)}{flag}"), highlight=False)


def _published_count(result) -> str:
    judged = sum(1 for row in result.published if row.measured is not None)
    return f", {judged} published number(s) set against them" if result.published else ""


def _something_to_report(result) -> None:
    """Refuse (exit 2) a report with neither a measured point nor a published number with a measured value."""
    from dlrun.errors import UsageError

    if not result.points and not any(row.measured is not None for row in result.published):
        raise UsageError(f"{result.runs_total} stored run(s) match {result.selection}, but none succeeded with a "
                         "result to report; see dlrun results list")


def _refuse_pooled(result, allow_mismatch: bool) -> None:
    """A table that would pool runs of different sites or machines is refused unless --allow-mismatch."""
    from dlrun.results.compare import MismatchError
    from dlrun.results.compare.select import pooled_identities

    pooled = pooled_identities(result.differences)
    if pooled and not allow_mismatch:
        raise MismatchError(pooled)


def _preload() -> None:
    """Import pandas and SciPy's t distribution on a second thread while the store is read (SQLite lets go
    of the interpreter while it queries); matplotlib is the plotting process's. The tables' own `import
    pandas` and the statistics' `import scipy.special` wait for this one (Python's per-module import
    lock), so there is nothing to join."""
    import threading

    def imports() -> None:
        try:
            import scipy.special  # noqa: F401  (the statistics' t distribution: needed first, by gather)
            import pandas  # noqa: F401
        except ImportError:
            pass  # said where it is used

    threading.Thread(target=imports, name="dlrun-report-imports", daemon=True).start()


def _experiments(store, names: list[str]) -> list:
    """The catalog's experiments among `names`; a name that is neither in the catalog nor in the store is
    a UsageError with the closest of both."""
    if not names:
        return []
    from dlrun.cli.options import load_catalog
    from dlrun.errors import UsageError, unknown_name

    catalog = load_catalog()
    known = set(catalog.experiments)
    stored = {value for value in store.distinct("experiment") if value}
    for name in names:
        if name not in known and name not in stored:
            raise unknown_name("experiment", name, known | stored)
        if name not in stored:
            raise UsageError(f"no stored run of experiment {name!r} to report; run it first: dlrun reproduce {name}")
    return [catalog.experiments[name] for name in names if name in known]
