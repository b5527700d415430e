"""An experiment's published numbers beside the measured points: `dlrun reproduce`'s own reading of the
references (the experiment's points planned for each of its systems, what the store holds of each point,
the verdict against the published value) turned into rows and plot markers, each with its quote.

A reference is drawn where it names one throughput of one configuration (a value or a range, no derived
quantity) in the stored unit; every other quantitative reference is listed in the table only, and
qualitative ones (findings) with their quotes.
"""
from __future__ import annotations

from dlrun.catalog import Catalog
from dlrun.catalog.experiments import ExperimentSpec
from dlrun.images.verify import with_local_image
from dlrun.reproduce import ReferenceRow, compare_references, prepare
from dlrun.results.compare.groups import UNIT_ALIASES
from dlrun.results.store import Store

from dlrun.report.gather import Published, Report


def add_published(report: Report, catalog: Catalog, spec: ExperimentSpec, store: Store) -> None:
    """Fill the report's published rows and findings from experiment `spec`."""
    report.experiments.append(spec)
    _, systems = prepare(catalog, spec.id, system=None, where=(), repeats=None, dry_run=True,
                         local_image=with_local_image, store=store)
    seen: set[tuple[str, str | None]] = set()
    for system_work in systems:
        by_id = {work.id: work for work in system_work.works}
        for row in compare_references(spec, system_work.works, system_work.system):
            if (row.reference.id, system_work.system) in seen:
                continue
            seen.add((row.reference.id, system_work.system))
            anchor = f"ref-{spec.id}-{row.reference.id}" + (f"-{system_work.system}" if len(systems) > 1 else "")
            keys = [by_id[p].key for p in row.points if p in by_id and by_id[p].key is not None]
            report.published.append(_published(report, spec, row, anchor, system_work.system, keys))
    for ref in spec.references:
        if ref.kind == "qualitative":
            report.findings.append({"id": ref.id, "anchor": f"ref-{spec.id}-{ref.id}", "doc": ref.source.doc or spec.document.name,
                                    "where": ref.source.where, "quote": ref.source.quote})


def _published(report: Report, spec: ExperimentSpec, row: ReferenceRow, anchor: str, system: str | None,
               keys: list[dict]) -> Published:
    """A reference's row as the report shows it, drawn where it names one throughput of one configuration."""
    ref = row.reference
    placed = {(k.get("workload"), k.get("model"), k.get("devices")) for k in keys}
    drawable = (ref.metric == "throughput" and ref.derive is None and len(placed) == 1
                and UNIT_ALIASES.get(ref.unit or "", ref.unit) in (report.unit, "images/sec")
                and row.verdict != "unit differs")
    workload, model, devices = placed.pop() if len(placed) == 1 else (None, None, None)
    value = ref.value if ref.value is not None else (sum(ref.range) / 2 if ref.range else None)
    return Published(
        anchor=anchor, ref_id=ref.id, series=(workload, model) if drawable else None,
        line=system if drawable else None, devices=devices, value=value, text=row.published, unit=ref.unit,
        verdict=row.verdict, measured=row.measured, ci=row.ci, ratio=row.ratio, runs=row.runs, points=row.points,
        why=row.why, doc=ref.source.doc or spec.document.name, where=ref.source.where, quote=ref.source.quote,
        metric=ref.metric, subject=_subject(ref.conditions), interval=row.interval,
        repeats_needed=row.repeats_needed)


def _subject(conditions: dict) -> str:
    """What a reference is about, as the paper names it: "ResNet50", or "model ResNet50, gpus 8"."""
    if len(conditions) == 1:
        return str(next(iter(conditions.values())))
    return ", ".join(f"{name} {value}" for name, value in conditions.items())
