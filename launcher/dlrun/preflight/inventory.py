"""The node inventory with the tools every registered backend runs, and `dlrun doctor`'s report."""
from __future__ import annotations

from typing import Any

from dlrun.catalog import Catalog
from dlrun.plan import LocalImage, resolve_plan
from dlrun.preflight.checks import host_mpi_from, preflight
from dlrun.preflight.findings import Finding, findings_json
from dlrun.preflight.node_rules import live_model_finding, live_rule_findings
from dlrun.probe.host import node_inventory as probe_inventory
from dlrun.probe.mpi import parse_mpi_version
from dlrun.probe.topology import topology_problems
from dlrun.registry import RUNTIMES, SCHEDULERS


def backend_commands(registry) -> dict[str, str]:
    """{backend name: the command it runs} for every backend of a kind that declares a tool."""
    return {name: backend.tool.command for name, backend in registry.available().items() if backend.tool}


def node_inventory(gpu_topology: bool = False) -> dict[str, Any]:
    return probe_inventory(runtimes=backend_commands(RUNTIMES), schedulers=backend_commands(SCHEDULERS),
                           gpu_topology=gpu_topology)


def doctor_report(catalog: Catalog, *, system: str | None = None, image: str | None = None,
                  local_image: LocalImage | None = None, **choices: str | None) -> dict[str, Any]:
    """Inventory of this node plus the checks for running `system`'s default job (with `image`) from here;
    `choices` (launcher, runtime, fabric) check another combination than the system's default, resolved and
    refused as `dlrun run` resolves and refuses them."""
    inventory = node_inventory(gpu_topology=True)
    workload = "trivial" if "trivial" in catalog.workloads else sorted(catalog.workloads)[0]
    given = {name: value for name, value in choices.items() if value is not None}
    plan = resolve_plan(catalog, workload, system=system or "localhost", image=image, local_image=local_image,
                        **given)
    findings = preflight(plan, inventory)
    if not SCHEDULERS.get(plan.scheduler).runs_here:  # a job that runs here had them in preflight already
        findings += live_rule_findings(plan, inventory)
    findings.append(live_model_finding(inventory))
    host = host_mpi_from(inventory)
    declared = parse_mpi_version(plan.system.mpi) if plan.system.mpi else None
    if declared and host and (declared.flavour, declared.series) != (host.flavour, host.series):
        findings.append(Finding("warn", "mpi-declared", f"system {plan.system.name} declares {declared.describe()} "
                                f"but this node has {host.describe()}",
                                "load the site's MPI module, or correct `mpi` in the system profile"))
    usable = inventory["fabrics"]["usable"]
    missing = [f for f in plan.system.fabrics if f not in usable]
    if missing and not plan.system.detected:
        findings.append(Finding("warn", "fabric", f"this node offers {', '.join(usable)}; system "
                                f"{plan.system.name} lists {', '.join(plan.system.fabrics)}",
                                f"run `dlrun doctor --system {plan.system.name}` on a compute node of that system"))
    for check, message, fix in topology_problems(inventory.get("topology") or {}):
        findings.append(Finding("warn", check, message, fix))
    if not findings:
        findings.append(Finding("ok", "all", "no problems found"))
    return {
        "inventory": inventory,
        "plan": {"system": plan.system.name, "image": plan.image.name, "scheduler": plan.scheduler,
                 "launcher": plan.launcher, "runtime": plan.runtime, "fabric": plan.fabric},
        "checks": findings_json(findings),
    }
