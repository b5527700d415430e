"""`dlrun experiments list|show`: the experiments of the source documents (and dlrun's own), their axes,
published numbers with quotes, deviations, status, and the points each system can or cannot run."""
from __future__ import annotations

from typing import Annotated, Optional

import typer

from dlrun.cli.options import JsonOpt, _names, load_catalog
from dlrun.cli.output import console, fields_table, handle_errors, print_json, table

experiments_app = typer.Typer(help="Experiments: the published matrices dlrun reproduces, with their numbers.",
                              no_args_is_help=True)

ExperimentArg = Annotated[str, typer.Argument(help="Experiment id (see `dlrun experiments list`).",
                                              show_default=False, autocompletion=_names("experiments"))]
ShowSystemOpt = Annotated[Optional[str], typer.Option(
    "--system", "-s", help="Show the points of this system only (default: each of the experiment's systems).",
    show_default=False, autocompletion=_names("systems"))]


@experiments_app.command("list")
@handle_errors
def experiments_list(as_json: JsonOpt = False) -> None:
    """List experiments: document, where in it, systems, status, how many published numbers."""
    from dlrun.catalog.experiment_tables import LIST_COLUMNS, experiment_rows, list_table

    rows = experiment_rows(load_catalog())
    if as_json:
        print_json(rows)
        return
    if console().width < WIDE_LIST:
        narrow_list(rows)
        return
    table("experiments", LIST_COLUMNS, list_table(rows))


#: Below this many columns the experiments' eight columns wrap into unreadable slivers: each is then listed as
#: its id beside three lines (status and references; title; document, where, measure and systems).
WIDE_LIST = 160


def narrow_list(rows: list[dict]) -> None:
    from rich.table import Table

    from dlrun.text import for_rich

    out = Table(title="experiments", show_header=True, show_lines=True)
    out.add_column("id", no_wrap=True)
    out.add_column("status; title; document, where: measure on systems")
    for row in rows:
        refs = row["references"]
        out.add_row(for_rich(row["id"]), for_rich(
            f"{row['status']}; references {refs['quantitative']} quantitative, {refs['qualitative']} qualitative\n"
            f"{row['title']}\n"
            f"{row['document']}, {row['where']}: {row['measure']} on {', '.join(row['systems']) or '-'}"))
    console().print(out)


@experiments_app.command("show")
@handle_errors
def experiments_show(name: ExperimentArg, system: ShowSystemOpt = None, as_json: JsonOpt = False) -> None:
    """Show an experiment: axes, published numbers with their sources and quotes, deviations, status, and
    its points on each of its systems, with the reason for each point a system cannot run."""
    from dlrun.catalog.experiment_points import expand
    from dlrun.catalog.experiment_tables import experiment_data, show_rows
    from dlrun.cli.reproduce_view import points_of_catalog
    from dlrun.reproduce.select import choose_systems

    catalog = load_catalog()
    experiment = catalog.experiment(name)
    if system is not None or experiment.measure == "model-facts":
        systems = choose_systems(experiment, system, dry_run=True)  # a system of the experiment's, or none
    else:
        systems = list(experiment.systems)
    if as_json:
        print_json(experiment_data(catalog, experiment.id, system))
        return
    rows = _with_settings(experiment, show_rows(catalog, experiment.id))
    if experiment.status.requires:  # derived from the code, never written down (dlrun.catalog.capabilities)
        from dlrun.catalog.capabilities import requirements_text

        at = next(index for index, row in enumerate(rows) if row[0] == "status") + 1
        rows.insert(at, ["status requires", requirements_text(experiment.status.requires, catalog)])
    fields_table(f"experiment {experiment.id}", rows)
    for shown in systems:
        spec = catalog.system(shown) if shown else None
        points_of_catalog(expand(experiment, spec, catalog.workloads, catalog.images), shown)


def _with_settings(experiment, rows: list[list[str]]) -> list[list[str]]:
    """The catalog's rows, with what a reader needs before the points: what is measured, how long and how
    often each run is, and what the document leaves unclear."""
    run = experiment.run
    extra = [["description", experiment.description]]
    if run is not None:
        steps = "the workload's" if run.steps is None else str(run.steps)
        warmup = "the workload's" if run.warmup_steps is None else str(run.warmup_steps)
        extra.append(["runs", f"{steps} timed steps after {warmup} warm-up, {run.repeats} repeat(s): {run.why}"])
    extra += [[name, text] for name, text in (("ambiguous", experiment.ambiguous), ("note", experiment.note)) if text]
    where = next((index for index, row in enumerate(rows) if row[0] == "where"), len(rows) - 1) + 1
    return rows[:where] + extra + rows[where:]
