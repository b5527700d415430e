"""The quality verdict of every compared point (dlrun.results.quality has the verdicts and thresholds), and
what a reader must know about the runs behind a comparison: their sites, their machines, how many are not ok.

A point's verdict is the worst of its runs' stored verdicts (a row that compares two sets of runs, such as a
system against its baseline, takes both) and of what the point itself shows: a scaling efficiency well above
100 % (against the comparable runs on the fewest devices, whatever the mode), or a FLOP rate or bus
bandwidth above what the machine can do (the efficiency columns, where the mode has them). Against a
published number (reference mode) an implausible point is left out of the verdict, and the notes say so.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dlrun.results.key import UNKNOWN, machine_label
from dlrun.results.quality import SUPERLINEAR, VERDICTS, point_reasons, worst
from dlrun.results.compare.stats import mean_rate

from dlrun.results.compare.types import Comparison
from dlrun.results.compare.select import Group

#: Key fields that follow from the device count: runs that differ only in them are one scaling series.
_SCALING_FIELDS = frozenset({"devices", "nodes", "global_batch", "fabric", "fabric_rate"})
COLUMNS = ["quality", "quality_reasons"]
#: The runs' own reasons (`annotate`'s `named`) listed per point; the rest are counted.
NAMED = 3


def superlinear(groups: Iterable[Group]) -> dict[int, str]:
    """id() of a group -> why its point is implausible, for every group whose throughput per device is well above that
    of the comparable group on the fewest devices (scaling efficiency above SUPERLINEAR)."""
    series: dict[str, list[Group]] = {}
    for group in groups:
        if not isinstance(group.key.get("devices"), int) or not group.values:
            continue
        rest = {k: v for k, v in group.key.items() if k not in _SCALING_FIELDS}
        series.setdefault(repr(sorted(rest.items(), key=str)) + f"|{group.site}|{group.metric}", []).append(group)
    out: dict[int, str] = {}
    for members in series.values():
        base = min(members, key=lambda g: g.key["devices"])
        base_rate = mean_rate(base.values) / base.key["devices"]
        for group in members:
            if group.key["devices"] == base.key["devices"] or base_rate <= 0:
                continue
            eff = mean_rate(group.values) / group.key["devices"] / base_rate
            if eff > SUPERLINEAR:
                reason = (f"implausible: scaling efficiency {eff * 100:.0f} % over {base.key['devices']} device(s) "
                          f"(above {SUPERLINEAR * 100:.0f} %)")
                out[id(group)] = reason
    return out


def run_ids(groups: Iterable[Group]) -> list[str]:
    """Every run the groups list (a group lists its newest runs: `Group.run_ids`)."""
    return [run_id for group in groups for run_id in group.run_ids]


def _row_verdict(row: dict[str, Any], owners: dict[str, Group], flagged: dict[int, str],
                 named: Mapping[str, list[str]] | None) -> tuple[str, list[str]]:
    """The verdict of a row from its runs' groups (the row lists at least one run of each: their verdicts are
    counted whole, listed or not), with the listed runs' own reasons `named` (the first NAMED of them)."""
    ids = [*(row.get("runs") or []), *(row.get("baseline_runs") or [])]
    mine = list({id(g): g for g in (owners.get(run_id) for run_id in ids) if g is not None}.values())
    unowned = sum(1 for run_id in ids if run_id not in owners)
    counts = _counted(mine, unowned)
    found = [verdict for verdict in counts]
    total = sum(counts.values())
    reasons = [f"{n} of {total} run(s) {verdict}" for verdict, n in counts.items() if verdict != "ok"]
    reasons += sorted({flagged[id(g)] for g in mine if id(g) in flagged})
    reasons += _named(ids, named or {})
    scaling_said = any(r.startswith("implausible: scaling efficiency") for r in reasons)
    reasons += [r for r in point_reasons(row)
                if not (scaling_said and r.startswith("implausible: scaling efficiency"))]
    verdict = worst([*found, *(r.split(":", 1)[0] for r in reasons if ":" in r)])
    return verdict, reasons


def _named(ids: list[str], named: Mapping[str, list[str]]) -> list[str]:
    """The first NAMED of the runs' own reasons, each with its run, and how many more there are."""
    said = [f"{reason} (run {run_id})" for run_id in ids for reason in named.get(run_id, ())]
    return said[:NAMED] + [f"and {len(said) - NAMED} more such reason(s)"] * (len(said) > NAMED)


def annotate(comparison: Comparison, groups: list[Group], named: Mapping[str, list[str]] | None = None) -> Comparison:
    """Give every row of `comparison` its point's verdict and reasons (with the runs' own reasons `named`: run id
    -> reasons, such as which rank was a straggler), and the comparison its sites, machines and run verdicts; in
    reference mode, leave implausible points out of the verdict against the published value."""
    owners = {run_id: g for g in groups for run_id in g.run_ids}
    flagged = superlinear(groups)
    for row in comparison.rows:
        row["quality"], row["quality_reasons"] = _row_verdict(row, owners, flagged, named)
        if comparison.mode == "reference" and row["quality"] in ("implausible", "emulated"):
            for name, left_out in (("within", None), ("verdict", f"left out: {row['quality']}")):
                if name in row:
                    row[name] = left_out
            comparison.notes.append(f"left out of the verdict against {row.get('label') or row.get('reference')}: "
                                    f"the point is {row['quality']} ({'; '.join(row['quality_reasons'])})")
    comparison.columns = [c for c in comparison.columns if c not in COLUMNS and c != "runs"] + COLUMNS + \
        [c for c in comparison.columns if c == "runs"]
    comparison.sites = sorted({str(g.key.get("site", g.site) or UNKNOWN) for g in groups})
    comparison.machines = sorted({machine_label(g.key) for g in groups})
    comparison.quality = _counted(groups)
    return comparison


def _counted(groups: Iterable[Group], unknown: int = 0) -> dict[str, int]:
    """verdict -> runs of these groups (and `unknown` more), worst first."""
    total: dict[str, int] = {"unknown": unknown} if unknown else {}
    for group in groups:
        for verdict, n in group.counts.items():
            total[verdict] = total.get(verdict, 0) + n
    return {v: total[v] for v in VERDICTS if v in total}
