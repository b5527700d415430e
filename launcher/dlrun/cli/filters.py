"""Options that select stored runs, shared by `results list` and `compare`, and the one function that
turns them into checked filters."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from dlrun.harness.harness_contract import PRECISIONS

WorkloadFilter = Annotated[Optional[list[str]], typer.Option(
    "--workload", "-w", help="Only runs of this workload (repeatable: any of them).", show_default=False)]
SystemFilter = Annotated[Optional[list[str]], typer.Option(
    "--system", "-s", help="Only runs on this system profile (repeatable).", show_default=False)]
ImageFilter = Annotated[Optional[list[str]], typer.Option(
    "--image", "-i", help="Only runs of this image: its name, or a digest prefix sha256:... (repeatable).",
    show_default=False)]
StatusFilter = Annotated[Optional[list[str]], typer.Option(
    "--status", help="Only runs in this state: ok, failed or cancelled (repeatable).", show_default=False)]
SiteFilter = Annotated[Optional[list[str]], typer.Option(
    "--site", help="Only runs from this site (repeatable).", show_default=False)]
ExperimentFilter = Annotated[Optional[list[str]], typer.Option(
    "--experiment", help="Only runs made for this experiment (repeatable).", show_default=False)]
PrecisionFilter = Annotated[Optional[list[str]], typer.Option(
    "--precision", help=f"Only runs at this precision: {', '.join(PRECISIONS)} (repeatable).",
    show_default=False)]
BatchSizeFilter = Annotated[Optional[list[int]], typer.Option(
    "--batch-size", help="Only runs of this batch size per rank (repeatable).", show_default=False)]
NodesFilter = Annotated[Optional[list[int]], typer.Option(
    "--nodes", help="Only runs on this many nodes (repeatable).", show_default=False)]
SinceFilter = Annotated[Optional[str], typer.Option(
    "--since", help="Only runs created since a date (2026-11-01), a UTC time (2026-11-01T12:00) or an age "
    "(90m, 12h, 7d, 2w).", show_default=False)]


def build_filters(store, run_ids: list[str] | None = None, *, workload=None, system=None, image=None,
                  status=None, site=None, experiment=None, since=None, precision=None, batch_size=None,
                  nodes=None):
    """Checked filters: run id prefixes resolved, every value one the store holds or the catalogs define
    (else exit 2 with the closest such value), `--since` parsed."""
    from dlrun.results.store.query import Filters, check_values, parse_since

    filters = Filters(run_ids=store.resolve_ids(run_ids or []), workload=tuple(workload or ()),
                      system=tuple(system or ()), image=tuple(image or ()), status=tuple(status or ()),
                      site=tuple(site or ()), experiment=tuple(experiment or ()),
                      precision=tuple(precision or ()), batch_size=tuple(batch_size or ()),
                      nodes=tuple(nodes or ()), since=parse_since(since) if since is not None else None)
    check_values(filters, store.distinct, catalog_names, store.has_value)
    return filters


#: filter -> the catalog attribute that holds the names it may take before any run of them is stored.
_CATALOG_KINDS = {"workload": "workloads", "system": "systems", "image": "images", "experiment": "experiments"}


def catalog_names(name: str) -> set[str]:
    """The names the catalogs define for filter `name` (none for a site: sites are whatever runs say)."""
    kind = _CATALOG_KINDS.get(name)
    if kind is None:
        return set()
    from dlrun.cli.options import load_catalog

    return set(getattr(load_catalog(), kind))
