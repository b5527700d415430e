"""What `dlrun experiments list|show [--json]` prints: rows for a table, and the full data as JSON."""
from __future__ import annotations

from typing import Any

from dlrun.catalog.experiment_points import effective_status, expand
from dlrun.catalog.experiments import ExperimentSpec, Status
from dlrun.catalog.loader import Catalog

LIST_COLUMNS = ["id", "document", "where", "measure", "systems", "status", "references (quant/qual)", "title"]


def status_text(status: Status) -> str:
    if status.kind == "needs-workload":
        return f"needs-workload {', '.join(status.workloads)}"
    return status.kind


def experiment_rows(catalog: Catalog) -> list[dict[str, Any]]:
    """One row per experiment, in id order (the seeds' ids sort by document)."""
    rows = []
    for experiment in sorted(catalog.experiments.values(), key=lambda e: e.id):
        quantitative, qualitative = experiment.reference_counts()
        rows.append({"id": experiment.id, "document": experiment.document.name, "where": experiment.where,
                     "measure": experiment.measure, "systems": list(experiment.systems),
                     "status": status_text(effective_status(experiment, catalog.workloads)),
                     "references": {"quantitative": quantitative, "qualitative": qualitative},
                     "title": experiment.title})
    return rows


def list_table(rows: list[dict[str, Any]]) -> list[list[str]]:
    """`experiment_rows` as table cells, in LIST_COLUMNS order."""
    return [[row["id"], row["document"], row["where"], row["measure"], ", ".join(row["systems"]) or "-",
             row["status"], f"{row['references']['quantitative']}/{row['references']['qualitative']}",
             row["title"]] for row in rows]


def experiment_data(catalog: Catalog, name: str, system: str | None = None) -> dict[str, Any]:
    """The experiment as JSON, its status today, and its points for each of its systems (or for `system`)."""
    experiment = catalog.experiment(name)
    data = experiment.model_dump(mode="json")
    data["status_now"] = effective_status(experiment, catalog.workloads).model_dump(mode="json")
    data["points"] = {label: [point.as_dict() for point in points]
                      for label, points in _points(catalog, experiment, system).items()}
    return data


def _points(catalog: Catalog, experiment: ExperimentSpec, system: str | None) -> dict[str, list]:
    if experiment.measure == "model-facts":
        return {"-": expand(experiment, None, catalog.workloads, catalog.images)}
    names = [system] if system else experiment.systems
    return {name: expand(experiment, catalog.system(name), catalog.workloads, catalog.images) for name in names}


def show_rows(catalog: Catalog, name: str) -> list[list[str]]:
    """field / value rows for `dlrun experiments show NAME` (the table form)."""
    experiment = catalog.experiment(name)
    doc = experiment.document
    rows = [["id", experiment.id], ["title", experiment.title], ["document", f"{doc.name}: {doc.title}"],
            ["where", experiment.where], ["status", status_text(effective_status(experiment, catalog.workloads))]]
    if experiment.status.reason and effective_status(experiment, catalog.workloads).kind != "runnable":
        rows.append(["status reason", experiment.status.reason])  # a runnable experiment's old reason is moot
    rows.append(["systems", ", ".join(experiment.systems) or "- (counted from the harness's models)"])
    for axis in experiment.axes:
        rows.append([f"axis {axis.name}", ", ".join(
            f"{v.paper}" + (f" -> {v.dlrun}" if v.dlrun is not None and v.dlrun != v.paper else "")
            + (" -> (none)" if v.dlrun is None else "") for v in axis.values)])
    for exclusion in experiment.exclusions:
        rows.append(["excluded", f"{_conditions(exclusion.when)}: {exclusion.why}"])
    for deviation in experiment.deviations:
        rows.append([f"deviation {deviation.setting}",
                     f"paper: {deviation.paper}; dlrun: {deviation.dlrun} ({deviation.reason})"])
    for ref in experiment.references:
        published = _published(ref)
        where = f" [{_conditions(ref.conditions)}]" if ref.conditions else ""
        rows.append([f"{ref.kind} {ref.id}", f"{ref.metric}{where}{published} - {ref.source.where}: "
                                             f"\"{ref.source.quote}\""])
    for label, points in _points(catalog, experiment, None).items():
        runnable = sum(1 for point in points if point.skip is None)
        rows.append([f"points on {label}", f"{len(points)} ({runnable} runnable, {len(points) - runnable} skipped)"])
    return rows


def _published(ref) -> str:
    if ref.kind == "qualitative":
        return ""
    shown = f"{ref.value:g}" if ref.value is not None else f"{ref.range[0]:g}..{ref.range[1]:g}"
    check = {"at-most": " at most", "at-least": " at least", "informational": " (informational)"}.get(ref.check, "")
    return f":{check} {shown} {ref.unit}"


def _conditions(conditions) -> str:
    return ", ".join(f"{key}={value}" for key, value in conditions.items())
