"""An experiment's published numbers (the catalog's references) against the stored runs of its points, as
`dlrun reproduce` judges them (dlrun.reproduce.references: the interval of the measured value against the
tolerance band of the published one, implausible points left out)."""
from __future__ import annotations

from dlrun.catalog import Catalog
from dlrun.reproduce import ReferenceRow, compare_references, prepare
from dlrun.reproduce.model_facts import FACT_UNITS
from dlrun.results.store import Store

from dlrun.gate import Outcome, outcome_of

#: reproduce's verdicts that judge nothing (a finding, a derived quantity compare computes, not measured).
NOT_JUDGED = frozenset({"informational", "skipped", "derived", "not measured"})


def judge_published(catalog: Catalog, store: Store, experiment: str) -> list[Outcome]:
    """One outcome per judged quantitative reference of `experiment` and system."""
    from dlrun.images.verify import with_local_image

    spec, systems = prepare(catalog, experiment, system=None, where=(), repeats=None, dry_run=True,
                            local_image=with_local_image, store=store)
    outcomes = []
    for system_work in systems:
        repeats = max((work.repeats for work in system_work.works), default=3)
        for row in compare_references(spec, system_work.works, system_work.system):
            if row.verdict not in NOT_JUDGED:
                outcomes.append(_outcome(spec.id, row, str(system_work.system or "no system"), repeats))
    return outcomes


def _below(row: ReferenceRow) -> bool:
    ref = row.reference
    if ref.check == "at-most":
        return False  # outside an at-most band is above it
    if ref.check == "at-least":
        return True
    published = ref.value if ref.value is not None else (ref.range[0] if ref.range else 0.0)
    return row.measured is not None and row.measured < published


def _outcome(experiment: str, row: ReferenceRow, system: str, repeats: int) -> Outcome:
    ref = row.reference
    measured = "no stored run" if row.measured is None else \
        f"measured {row.measured:,.4g} {row.unit or ref.unit} over {row.runs} run(s)"
    if row.ci is not None:
        measured += f" (95 % CI {row.ci[0]:,.4g}-{row.ci[1]:,.4g})"
    why = f"{measured} against the published {row.published}; {row.why}".rstrip("; ")
    if row.verdict == "no runs":
        outcome, needed = "inconclusive", repeats
    elif row.verdict in ("within", "outside", "inconclusive"):
        better = "lower" if ref.check == "at-most" else "higher"
        outcome, needed = outcome_of(row.verdict, _below(row), better), row.repeats_needed
        if ref.metric in FACT_UNITS and row.verdict == "outside":
            outcome, why = "error", why + "; a counted fact of the model differs: not the published model"
    else:  # unit differs, implausible
        outcome, needed = "error", None
        why = f"{row.verdict}: {why}"
    where = ", ".join(part for part in (ref.source.doc, ref.source.where) if part)
    return Outcome(outcome, "published", f"{experiment} {ref.id} ({ref.metric})", system, why,
                   repeats_needed=needed, source=where or experiment,
                   numbers={"measured": row.measured, "ci": row.ci, "ratio": row.ratio, "unit": row.unit})
