"""A site's own references, per system, in `config.yaml`, and the newest runs of each configuration judged
against them by `dlrun compare`'s reference mode (the interval of the geometric mean against the band).

    references:
      mycluster:                                # a system
        - match: {workload: resnet50, devices: 8}   # key fields that pick the configuration
          value: 2890
          unit: images/sec
          tolerance_pct: 5
          source: {doc: "acceptance test of 2026-03", where: "run 1f3a", quote: ""}   # optional
"""
from __future__ import annotations

from typing import Any

from dlrun.errors import UsageError
from dlrun.results.compare import MismatchError, Reference, compare
from dlrun.results.compare.reference_values import reference_from_data
from dlrun.results.store import Store
from dlrun.results.store.query import Filters

from dlrun.gate import Outcome, outcome_of, undecided
from dlrun.gate.series import Series, subject

EXAMPLE = "references: {SYSTEM: [{match: {workload: resnet50, devices: 8}, value: 2890, unit: images/sec}]}"


def site_references() -> list[tuple[str, Reference]]:
    """(system, reference) for every entry of config.yaml's `references:`; a bad entry is a UsageError
    naming the file and the entry."""
    from dlrun.config import config_file, site_config

    data = site_config().get("references")
    if data is None:
        return []
    origin = str(config_file())
    if not isinstance(data, dict):
        raise UsageError(f"{origin}: references must map each system to a list of references; valid: {EXAMPLE}")
    out = []
    for system, entries in data.items():
        if not isinstance(entries, list):
            raise UsageError(f"{origin}: references: {system}: a list of references, got "
                             f"{type(entries).__name__}; valid: {EXAMPLE}")
        for index, entry in enumerate(entries):
            out.append((str(system), _reference(entry, f"{origin}: references: {system}: entry {index + 1}",
                                                str(system))))
    return out


def _reference(entry: Any, where: str, system: str) -> Reference:
    if isinstance(entry, dict):
        entry = {"source": {"doc": "this site's config.yaml"}, "unit": "", **entry}
        match = entry.get("match")
        if match is None or isinstance(match, dict):
            entry["match"] = {**(match or {}), "system": system}
    return reference_from_data(entry, where)


def _applies(series: Series, ref: Reference) -> bool:
    return all(series.key.get(name) == value for name, value in ref.match.items())


def judge_site_references(store: Store, series: list[Series], references: list[tuple[str, Reference]]
                          ) -> tuple[list[Outcome], set[str]]:
    """The outcomes against the site's references, and the keys they judged."""
    outcomes: list[Outcome] = []
    judged: set[str] = set()
    for system, ref in references:
        mine = [s for s in series if _applies(s, ref)]
        judged |= {s.group.key_hash for s in mine}
        outcomes += _judge(store, system, ref, mine)
    return outcomes, judged


def _described(ref: Reference) -> str:
    return ", ".join(f"{name} {value}" for name, value in ref.match.items() if name != "system") or "every run"


def _judge(store: Store, system: str, ref: Reference, mine: list[Series]) -> list[Outcome]:
    source = ", ".join(part for part in (ref.source.doc, ref.source.where) if part)
    if not mine:
        return [Outcome("inconclusive", "site reference", f"{_described(ref)} on {system}", system,
                        f"no stored ok run matches the reference {ref.value:g} {ref.unit}".rstrip()
                        + "; run the configuration", repeats_needed=3, source=source)]
    ids = tuple(run_id for s in mine for run_id, _ in s.newest)
    try:
        result = compare(store, Filters(run_ids=ids), mode="reference", references=[ref])
    except MismatchError as exc:
        return [Outcome("error", "site reference", f"{_described(ref)} on {system}", system,
                        f"the runs it matches are not like-for-like with each other or with it: "
                        f"{'; '.join(exc.differences)}", ids, source=source)]
    by_key = {s.group.key_hash: s for s in mine}
    return [_row_outcome(row, by_key[row["key_hash"]], ref, source) for row in result.rows]


def _row_outcome(row: dict[str, Any], series: Series, ref: Reference, source: str) -> Outcome:
    unit = row["unit"]
    interval = (f"95 % CI {row['ci_low']:,.4g}-{row['ci_high']:,.4g}" if row.get("ci_low") is not None
                else row["interval"])
    why = (f"geometric mean {row['geomean']:,.4g} {unit} of the newest {row['n']} run(s) ({interval}), "
           f"{row['ratio']:.3f} x the reference {ref.value:,.4g} {unit} (band ±{ref.tolerance * 100:g} %)")
    verdict = row.get("verdict")
    if verdict is None or str(verdict).startswith("left out"):
        outcome = "error"
        why += f"; left out of the verdict: {'; '.join(row.get('quality_reasons') or [])}"
    else:
        outcome = outcome_of(verdict, row["ratio"] < 1.0, series.better)
        if outcome == "inconclusive":
            why += f"; {undecided(row['verdict_why'], row.get('repeats_needed'))}"
    return Outcome(outcome, "site reference", subject(series.key), series.system, why,
                   tuple(row.get("runs") or ()), row.get("repeats_needed"), source, series.group.key_hash,
                   {"geomean": row["geomean"], "ci_low": row.get("ci_low"), "ci_high": row.get("ci_high"),
                    "reference": ref.value, "unit": unit})
