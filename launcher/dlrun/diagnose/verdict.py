"""Which node or link is slow: the pairs' probes against each other, the single nodes' probes against each
other, and every probe against the site's baseline for its key (the rules: dlrun.diagnose)."""
from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from typing import Any, Mapping, Sequence

#: A probe is slow below this fraction of the reference, unless --threshold says otherwise.
DEFAULT_THRESHOLD = 0.8
BELOW_BASELINE = "below baseline"


@dataclass(frozen=True)
class Probe:
    """One short run on a pair of nodes (a collective) or on one node (training), as stored."""

    nodes: tuple[str, ...]
    status: str                        # the run's: ok | failed | cancelled | timeout ...
    value: float | None = None
    unit: str | None = None
    metric: str | None = None
    run_id: str | None = None
    reason: str | None = None
    #: dlrun.results.compare.history.judge's verdict of the value against its key's baseline.
    baseline: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return ",".join(self.nodes)

    @property
    def measured(self) -> bool:
        return self.status == "ok" and self.value is not None


@dataclass(frozen=True)
class Finding:
    kind: str      # node | link | compute | baseline
    subject: str   # a node, a pair (a,b), or "every pair"
    why: str


@dataclass(frozen=True)
class Verdicts:
    """The reference of the pairs and of the single nodes, the probes found slow, and the findings."""

    pair_reference: float | None
    node_reference: float | None
    slow: frozenset[str]               # Probe.name of every slow (or failed) probe
    findings: tuple[Finding, ...]


def reference(values: Sequence[float]) -> float | None:
    """The median of the best quarter of `values` (at least one), higher being better."""
    if not values:
        return None
    best = sorted(values, reverse=True)[:max(1, len(values) // 4)]
    return float(median(best))


def _slow(probes: Sequence[Probe], ref: float | None, threshold: float) -> dict[str, str]:
    """Probe name -> why it is slow, for the slow and the failed probes."""
    slow = {}
    for probe in probes:
        if not probe.measured:
            slow[probe.name] = f"{probe.status}: {probe.reason or 'no value'} (run {probe.run_id or '-'})"
        elif ref and probe.value < threshold * ref:  # type: ignore[operator]
            slow[probe.name] = (f"{probe.value:.4g} {probe.unit or ''}".rstrip()
                                + f", {probe.value / ref:.2f}x the reference {ref:.4g} (run {probe.run_id})")
    return slow


def _nodes(pairs: Sequence[Probe], slow: Mapping[str, str]) -> list[Finding]:
    """Nodes every pair of which is slow while some pair without them is not."""
    found = []
    for node in dict.fromkeys(node for probe in pairs for node in probe.nodes):
        mine = [probe for probe in pairs if node in probe.nodes]
        others_fine = [probe for probe in pairs if node not in probe.nodes and probe.name not in slow]
        if mine and others_fine and all(probe.name in slow for probe in mine):
            evidence = "; ".join(f"{probe.name}: {slow[probe.name]}" for probe in mine)
            fine = ", ".join(probe.name for probe in others_fine)
            found.append(Finding("node", node, f"every pair with {node} is slow ({evidence}); without it "
                                              f"{fine} {'is' if len(others_fine) == 1 else 'are'} not"))
    return found


def _links(pairs: Sequence[Probe], slow: Mapping[str, str], bad_nodes: set[str]) -> list[Finding]:
    return [Finding("link", probe.name, f"{slow[probe.name]}; neither {' nor '.join(probe.nodes)} is slow in its "
                                        "other pairs")
            for probe in pairs if probe.name in slow and not bad_nodes & set(probe.nodes)
            and len(pairs) > 1]


def _baseline(probes: Sequence[Probe], pairs: Sequence[Probe], flagged: set[str]) -> list[Finding]:
    """Below the site's baseline: every pair at once (one finding), else the nodes all of whose probes are."""
    below = [probe for probe in probes if probe.baseline.get("verdict") == BELOW_BASELINE]
    if pairs and all(probe.baseline.get("verdict") == BELOW_BASELINE for probe in pairs):
        return [Finding("baseline", "every pair", "every pair is below its key's baseline: "
                        + "; ".join(f"{p.name}: {p.baseline.get('verdict_why')}" for p in pairs))]
    found = []
    for node in dict.fromkeys(node for probe in below for node in probe.nodes):
        mine = [probe for probe in probes if node in probe.nodes and probe.measured]
        if node not in flagged and len(pairs) > 1 and all(probe in below for probe in mine):
            found.append(Finding("baseline", node, "every probe with it is below its key's baseline: " + "; ".join(
                f"{p.name}: {p.baseline.get('verdict_why')}" for p in mine)))
    return found


def attribute(pairs: Sequence[Probe], singles: Sequence[Probe] = (),
              threshold: float = DEFAULT_THRESHOLD) -> Verdicts:
    """The findings of a diagnosis from its pair probes (a collective on two nodes) and single-node probes."""
    if not 0 < threshold < 1:
        raise ValueError(f"threshold {threshold}: a fraction of the reference between 0 and 1")
    pair_ref = reference([probe.value for probe in pairs if probe.measured])  # type: ignore[misc]
    node_ref = reference([probe.value for probe in singles if probe.measured])  # type: ignore[misc]
    slow_pairs = _slow(pairs, pair_ref, threshold)
    slow_nodes = _slow(singles, node_ref, threshold)
    findings = _nodes(pairs, slow_pairs)
    bad = {finding.subject for finding in findings}
    findings += _links(pairs, slow_pairs, bad)
    findings += [Finding("compute", probe.nodes[0], why) for probe in singles
                 if (why := slow_nodes.get(probe.name)) and len(singles) > 1]
    flagged = bad | {finding.subject for finding in findings if finding.kind == "compute"}
    findings += _baseline([*pairs, *singles], pairs, flagged)
    if len(pairs) == 1 and pairs[0].name in slow_pairs:  # two nodes: the pair cannot be split
        findings.append(Finding("link", pairs[0].name, f"{slow_pairs[pairs[0].name]}; with two nodes the pair "
                                                       "cannot be told apart: add a third node"))
    return Verdicts(pair_ref, node_ref, frozenset({*slow_pairs, *slow_nodes}), tuple(findings))
