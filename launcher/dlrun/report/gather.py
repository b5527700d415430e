"""What a report shows, as data: the selected runs grouped by comparability key (SQL, as `dlrun compare`
reads them), set out by compare's own modes, with the provenance of every point.

  scaling    one `compare` scaling table per system (throughput as the geometric mean of the repeats with
             its 95 % CI, speedup and scaling efficiency with their intervals over the fewest devices; PRACE
             guide Tables 8 and 9), each point with its raw repeats for the plots
  relative   with several systems: each relative to the baseline system (Ren et al. Table III)
  fabrics    with several fabrics: each against the baseline fabric (Samsi et al.)
  published  with an experiment from the catalog: its published numbers against the stored points (an
             experiment of counted model facts, Ren et al.'s Table II, has these and no measured points)
  runs       the newest selected runs (id, site, image and digest, experiment point), the rows the
             tables and plots link to

Whatever differs between the runs beyond what a table compares is collected from compare's like-for-like
guard: the report is written anyway and says it is not like-for-like. Every point carries its quality verdict
(dlrun.results.compare.verdicts), and the report says which sites and machines each table holds and how many
runs are not ok.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from dlrun.errors import DlrunError, UsageError
from dlrun.report.energy import Telemetry, gather_telemetry
from dlrun.report.ranks import RankTimes, gather_ranks
from dlrun.results.compare import EfficiencyInputs, FactsProvider
from dlrun.results.compare import axes as modes
from dlrun.results.compare.types import AXES, Comparison, sort_value
from dlrun.results.compare.select import Group, dropped_note, listed_note, load_groups
from dlrun.results.moments import Sample, pooled
from dlrun.results.compare.verdicts import annotate, run_ids
from dlrun.results.key import NOT_APPLICABLE, UNKNOWN
from dlrun.results.quality import summarize_verdicts
from dlrun.results.store.query import Filters
from dlrun.results.store import Store

#: The newest runs listed with their provenance (a table of 20,000 rows helps no reader).
RUN_ROWS = 500
#: Run ids written out per table row; the rest are counted.
IDS_PER_ROW = 6


@dataclass
class Point:
    """One measured point of a plot and a table row: a configuration's runs on one system."""

    anchor: str
    series: tuple            # (workload, model)
    system: str
    line: str                # the system, and the fabric where it has several: a line of the scaling plot
    devices: Any
    fabric: str
    row: dict[str, Any]      # the compare row (geomean, ci_low, ci_high, speedup ...)
    sites: list[str]
    images: list[str]
    digests: list[str]
    experiments: list[str] = field(default_factory=list)
    values: list[float] = field(default_factory=list)   # the repeats, drawn beside their geometric mean

    @property
    def run_ids(self) -> list[str]:
        return self.row["runs"]

    def provenance(self) -> str:
        """One line for a tooltip: what the point is and where its runs come from."""
        ids = self.run_ids
        shown = ", ".join(ids[:IDS_PER_ROW]) + (f" and {len(ids) - IDS_PER_ROW} more" if len(ids) > IDS_PER_ROW else "")
        quality = self.row.get("quality") or "unknown"
        why = f" ({'; '.join(self.row['quality_reasons'])})" if self.row.get("quality_reasons") else ""
        return (f"{self.series[0]} ({self.series[1]}) on {self.line}, {self.devices} device(s): "
                f"geometric mean {self.row['geomean']:.4g} of {self.row['n']} run(s){self._interval()}, "
                f"quality {quality}{why}; "
                f"site {', '.join(self.sites) or 'unknown'}; "
                f"image {', '.join(self.images) or 'unknown'} {', '.join(d[:19] for d in self.digests)}; runs {shown}")


    def _interval(self) -> str:
        low, high = self.row.get("ci_low"), self.row.get("ci_high")
        return " (too few repeats for an interval)" if low is None or high is None \
            else f", 95 % CI {low:.4g} to {high:.4g}"


@dataclass
class Published:
    """A published number drawn beside the measured points, with its source."""

    anchor: str
    ref_id: str
    series: tuple | None     # where it is drawn (None: listed only)
    line: str | None
    devices: Any
    value: float | None
    text: str                # the published value as printed (value or range, check, unit)
    unit: str | None
    verdict: str
    measured: float | None
    ci: tuple[float, float] | None
    ratio: float | None
    runs: int
    points: list[str]
    why: str
    doc: str
    where: str
    quote: str
    metric: str = "throughput"
    subject: str = ""        # what it is about, as the paper names it (its conditions: "ResNet50")
    interval: str = ""       # how `ci` was made, or why there is none
    repeats_needed: int | None = None

    def provenance(self) -> str:
        return f"published {self.text} ({self.doc}, {self.where}): \"{self.quote}\""


@dataclass
class Report:
    title: str
    selection: str
    unit: str | None
    points: list[Point]
    scaling: list[tuple[str, Comparison]]     # (line: system, or system and fabric; its scaling table)
    relative: Comparison | None
    fabrics: list[tuple[str, Comparison]]     # (system, its fabrics against the baseline fabric)
    differences: list[str]
    notes: list[str]
    runs: list[dict[str, Any]]
    runs_total: int
    published: list[Published] = field(default_factory=list)
    findings: list[dict[str, str]] = field(default_factory=list)   # qualitative references: id, quote
    experiments: list[Any] = field(default_factory=list)            # the catalog's ExperimentSpecs, if any
    quality: dict[str, int] = field(default_factory=dict)           # verdict -> successful runs reported
    holds: list[str] = field(default_factory=list)                  # per table: its sites and machines
    telemetry: Telemetry = field(default_factory=Telemetry)         # energy cells and power/utilisation traces
    ranks: list[RankTimes] = field(default_factory=list)           # per point: its newest run's per-rank times

    @property
    def like_for_like(self) -> bool:
        return not self.differences

    def listed(self) -> set[str]:
        return {run["id"] for run in self.runs}


def gather(store: Store, filters: Filters, *, title: str, selection: str, baseline: str | None = None,
           facts: FactsProvider | None = None, measured_only: bool = True) -> Report:
    """The report of the runs `filters` selects; a UsageError when none match, or (with `measured_only`)
    when none has a measured result (an experiment's report may hold only counted facts)."""
    total = store.count_runs(filters)
    if not total:
        raise UsageError(f"no stored run matches {selection or 'the selection'}; see dlrun results list")
    runs = store.list_runs(RUN_ROWS, filters)
    try:
        groups = load_groups(store, filters, by_site=True, summed=True)
    except DlrunError:  # nothing successful with a result
        if measured_only:
            raise UsageError(f"{total} stored run(s) match {selection or 'the selection'}, but none succeeded "
                             "with a result to report; see dlrun results list") from None
        return Report(title=title, selection=selection, unit=None, points=[], scaling=[], relative=None, fabrics=[],
                      differences=[], notes=[], runs=runs, runs_total=total)
    inputs = facts([g.key for g in groups]) if facts else EfficiencyInputs()
    inputs.matmul = functools.lru_cache(maxsize=None)(store.latest_matmul)  # one query per system, as compare
    systems = sorted({str(g.key.get("system")) for g in groups})
    named = store.run_reasons(run_ids(groups), "straggler")  # which rank, beside the verdict counts
    points, scaling = _scaling(groups, systems, inputs, named)
    differences = [f"on {line}: {text}" for line, result in scaling for text in result.differences]
    notes = [note for _, result in scaling for note in result.notes]
    relative = None
    if len(systems) > 1:
        relative = annotate(modes.relative(groups, AXES["system"], baseline), groups, named)
        differences += [f"between systems: {line}" for line in relative.differences]
        notes += relative.notes
    elif baseline is not None:
        raise UsageError(f"--baseline {baseline!r} picks the system the others are compared with; the selection "
                         f"holds one system ({systems[0]})")
    fabrics = _fabrics(groups, systems)
    for system, result in fabrics:
        differences += [f"between fabrics on {system}: {line}" for line in result.differences]
        notes += result.notes
    notes += dropped_note(groups) + listed_note(groups) + _sampled_note(points)
    units = {g.unit for g in groups}
    return Report(title=title, selection=selection, unit=units.pop() if len(units) == 1 else None, points=points,
                  scaling=scaling, relative=relative, fabrics=fabrics,
                  differences=list(dict.fromkeys(differences)), notes=list(dict.fromkeys(notes)), runs=runs,
                  runs_total=total, holds=_holds(scaling, relative, fabrics), quality=_verdicts(groups),
                  telemetry=gather_telemetry(store, points, runs), ranks=gather_ranks(store, points))


def _verdicts(groups: list[Group]) -> dict[str, int]:
    """verdict -> the reported runs that have it."""
    return summarize_verdicts(v for g in groups for v, n in g.counts.items() for _ in range(n))


def _holds(scaling: list[tuple[str, Comparison]], relative: Comparison | None,
           fabrics: list[tuple[str, Comparison]]) -> list[str]:
    """Per table, the sites and machines of its runs (the banner's second half)."""
    tables = [(f"scaling on {line}", result) for line, result in scaling]
    tables += [("systems relative to the baseline", relative)] if relative is not None else []
    tables += [(f"fabrics on {system}", result) for system, result in fabrics]
    return [f"{table}: site{'s' if len(result.sites) != 1 else ''} {', '.join(result.sites)}; "
            f"machine{'s' if len(result.machines) != 1 else ''} {'; '.join(result.machines) or 'unknown'}"
            for table, result in tables]


def _scaling(groups: list[Group], systems: list[str], inputs: EfficiencyInputs,
             named: dict[str, list[str]]) -> tuple[list[Point], list[tuple[str, Comparison]]]:
    """compare's scaling table for each line of each system, and the points of their rows."""
    points: list[Point] = []
    scaling: list[tuple[str, Comparison]] = []
    for system in systems:
        mine = [g for g in groups if str(g.key.get("system")) == system]
        for line, members in _lines(system, mine):
            result = annotate(modes.scaling(members, AXES["devices"], None, inputs), members, named)
            points += [_point(len(points) + i, system, line, row, members) for i, row in enumerate(result.rows)]
            scaling.append((line, result))
    return points, scaling


def _fabrics(groups: list[Group], systems: list[str]) -> list[tuple[str, Comparison]]:
    """Fabrics compared within each system that used several (Samsi et al.: one cluster, two networks)."""
    out = []
    for system in systems:
        wired = [g for g in groups if str(g.key.get("system")) == system
                 and g.key.get("fabric") not in (NOT_APPLICABLE, UNKNOWN, None)]
        if len({g.key.get("fabric") for g in wired}) > 1:
            out.append((system, annotate(modes.fabrics(wired, AXES["fabric"], None), wired)))
    return out


def _lines(system: str, groups: list[Group]) -> list[tuple[str, list[Group]]]:
    """The lines of a system: one, or one per fabric where its runs used several (each with the one-node
    runs, which use none, as their common start)."""
    wired = sorted({str(g.key.get("fabric")) for g in groups} - {NOT_APPLICABLE, UNKNOWN, "None"})
    if len(wired) < 2:
        return [(system, groups)]
    return [(f"{system} {fabric}", [g for g in groups if str(g.key.get("fabric")) in (fabric, NOT_APPLICABLE)])
            for fabric in wired]


def _point(index: int, system: str, line: str, row: dict[str, Any], groups: list[Group]) -> Point:
    mine = [g for g in groups if g.key.get("workload") == row["workload"] and g.key.get("model") == row["model"]
            and g.key.get("devices") == row["devices"]]
    return Point(anchor=f"pt-{index + 1}", series=(row["workload"], row["model"]), system=system, line=line,
                 devices=row["devices"], fabric="/".join(sorted({str(g.key.get("fabric")) for g in mine})), row=row,
                 sites=sorted({g.site for g in mine if g.site}), images=sorted({i for g in mine for i in g.images}),
                 digests=sorted({str(g.key.get("image_digest")) for g in mine}),
                 values=_dots(mine))


#: How many of a point's values its plot shows as dots (those of its newest runs) where it has more.
DOTS = 200


def _sampled_note(points: list[Point]) -> list[str]:
    if not any(len(p.values) < p.row.get("n", 0) for p in points):
        return []
    return [f"a point's dots show the values of its newest {DOTS} runs where it has more (its statistics are of "
            "all of them)"]


def _dots(groups: list[Group]) -> list[float]:
    """A point's values for its dots: all of them, or those of its newest DOTS runs (store aggregates)."""
    values = pooled(g.values for g in groups)
    return sorted(values.some(DOTS) if isinstance(values, Sample) else values)


def series_of(report: Report) -> list[tuple]:
    """The (workload, model) series, in order."""
    return sorted({p.series for p in report.points}, key=lambda s: [sort_value(v) for v in s])
