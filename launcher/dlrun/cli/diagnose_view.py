"""What `dlrun diagnose` prints: a table of the probes (value, ratio to the reference, the baseline's
verdict), then one line per finding with its evidence; or all of it as JSON."""
from __future__ import annotations

from typing import Any

from dlrun.cli.output import console, print_json, table
from dlrun.diagnose.verdict import Probe, Verdicts

METHOD = ("pairs: a collective on two nodes, every pair once, the pairs of a round at once; reference: the median "
          "of the best quarter of the probes of a kind; slow: below THRESHOLD x the reference; a node is slow when "
          "every pair with it is slow and some pair without it is not, a link when its pair is slow and neither "
          "node is; baseline: each probe's key's last ok runs stored before the diagnosis (compare --mode history)")


def _ratio(probe: Probe, reference: float | None) -> str | None:
    return f"{probe.value / reference:.2f}x" if probe.measured and reference else None


def _row(probe: Probe, reference: float | None, verdicts: Verdicts) -> list[Any]:
    value = f"{probe.value:.4g}" if probe.measured else None
    baseline = probe.baseline.get("verdict")
    if probe.baseline.get("history_median") is not None:
        baseline = (f"{baseline}: median {probe.baseline['history_median']:.4g}, 95 % interval "
                    f"[{probe.baseline['interval_low']:.4g}, {probe.baseline['interval_high']:.4g}]")
    return [probe.name, probe.status, value, probe.unit, _ratio(probe, reference),
            "slow" if probe.name in verdicts.slow else "", baseline, probe.run_id]


def as_data(nodes: list[str], pairs: list[Probe], singles: list[Probe], verdicts: Verdicts,
            threshold: float) -> dict[str, Any]:
    def probe(p: Probe, reference: float | None) -> dict[str, Any]:
        return {"nodes": list(p.nodes), "status": p.status, "value": p.value, "unit": p.unit, "metric": p.metric,
                "run_id": p.run_id, "reason": p.reason, "ratio_to_reference": (p.value / reference if p.measured
                                                                             and reference else None),
                "slow": p.name in verdicts.slow, "baseline": dict(p.baseline)}
    return {"nodes": nodes, "threshold": threshold, "method": METHOD,
            "pair_reference": verdicts.pair_reference, "node_reference": verdicts.node_reference,
            "pairs": [probe(p, verdicts.pair_reference) for p in pairs],
            "singles": [probe(p, verdicts.node_reference) for p in singles],
            "findings": [{"kind": f.kind, "subject": f.subject, "why": f.why} for f in verdicts.findings]}


def show(nodes: list[str], pairs: list[Probe], singles: list[Probe], verdicts: Verdicts, *, as_json: bool,
         threshold: float) -> None:
    if as_json:
        print_json(as_data(nodes, pairs, singles, verdicts, threshold))
        return
    columns = ["probe", "status", "value", "unit", "vs reference", "", "vs baseline", "run"]
    table(f"pair probes (reference {verdicts.pair_reference or 0:.4g}, slow below {threshold:g}x)", columns,
          [_row(p, verdicts.pair_reference, verdicts) for p in pairs])
    if singles:
        table(f"single-node probes (reference {verdicts.node_reference or 0:.4g})", columns,
              [_row(p, verdicts.node_reference, verdicts) for p in singles])
    out = console()
    if not verdicts.findings:
        out.print(f"dlrun diagnose: no slow node or link among {', '.join(nodes)}", markup=False)
    for finding in verdicts.findings:
        out.print(f"slow {finding.kind} {finding.subject}: {finding.why}", markup=False, soft_wrap=True)
