"""What the hardware did and looked like, added to a finished run: the telemetry summary (provenance and the
result's `extra.telemetry`), the topology every node's sampler recorded (`nodes_topology` in inventory.json),
and for a collective the bus bandwidth the detected path allows and the fraction of it reached."""
from __future__ import annotations

import json
from typing import Any

from dlrun.execute.rundir import RunDir
from dlrun.files import write_json
from dlrun.plan import Plan
from dlrun.probe.topology import expected_busbw, node_topology
from dlrun.registry import SCHEDULERS
from dlrun.telemetry.series import read_run
from dlrun.telemetry.summary import result_fields, summarize

NO_SAMPLES = ("no sampler wrote a sample (the job ended before the first one, or the nodes could not start it: "
              "see telemetry/sampler.log)")


def _inventory(run: RunDir) -> dict[str, Any]:
    try:
        data = json.loads((run.path / "inventory.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_hardware(plan: Plan, run: RunDir, result: dict[str, Any] | None, extra: dict[str, Any]) -> None:
    """Add the run's telemetry and topology to `extra` (provenance) and `result`, in place."""
    series = read_run(run.path) if plan.telemetry_period else []
    inventory = _inventory(run)
    nodes = {s.node: node_topology(s.header.get("links"), s.header.get("topo_m") if isinstance(
        s.header.get("topo_m"), str) else None) for s in series if isinstance(s.header.get("links"), dict)}
    if nodes:
        inventory["nodes_topology"] = nodes
        write_json(run.path / "inventory.json", inventory)
    if plan.telemetry_period:
        summary = summarize(series, result)
        pods = SCHEDULERS.get(plan.scheduler).runs_image
        extra["telemetry"] = summary or {"why": f"scheduler {plan.scheduler} starts the image itself; no sampler "
                                                "runs beside its pods" if pods else NO_SAMPLES}
        if summary and result is not None:
            result.setdefault("extra", {})["telemetry"] = result_fields(summary)
    if result is not None and not plan.workload.trains and result.get("metric") == "busbw":
        topo = next(iter(nodes.values()), None) or inventory.get("topology")
        gpus = (inventory.get("gpu") or {}).get("gpus") or [{}]
        expected = expected_busbw(topo, nodes=plan.nodes, gpu_name=gpus[0].get("name"), device=plan.device)
        if expected.get("value") and isinstance(result.get("value"), (int, float)):
            expected["fraction"] = round(result["value"] / expected["value"], 4)
        result.setdefault("extra", {})["expected_busbw"] = expected
