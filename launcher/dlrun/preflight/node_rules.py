"""The rules of dlrun.jobcheck in the pre-launch checks: the rendered job against its system's node model (at
plan time: `plan`, `--dry-run`, `run`), and the same rules against this node's own model where the job runs
here or `dlrun doctor` looks at it (GPUs' compute capability and NUMA nodes from nvidia-smi and sysfs, the NICs',
the driver), with the locked-memory limit of this node's processes."""
from __future__ import annotations

import dataclasses
import resource
from typing import Any

from dlrun.errors import DlrunError
from dlrun.jobcheck import check
from dlrun.nodemodel import live_node_model
from dlrun.plan import Plan
from dlrun.preflight.findings import Finding


def _finding(rule: str, message: str, fix: str | None, where: str = "") -> Finding:
    return Finding("error", f"rule {rule}", f"rule {rule}{where}: {message}", fix)


def job_rule_findings(plan: Plan) -> list[Finding]:
    """The rendered job's refusals (one error each). A plan that does not render at all is refused by whoever
    renders it (`run`, `--dry-run`), with its own message; `dlrun plan` still shows it."""
    rendered = _rendered(plan)
    return [_finding(f.rule, f.message, f.fix) for f in rendered.refusals] if rendered else []


def _rendered(plan: Plan):
    from dlrun.render import render_job

    try:
        return render_job(plan)
    except DlrunError:
        return None


def memlock_limit_kib() -> int | None:
    """This process's hard locked-memory limit in KiB; None: unlimited."""
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    return None if hard == resource.RLIM_INFINITY else hard // 1024


def live_rule_findings(plan: Plan, inventory: dict[str, Any]) -> list[Finding]:
    """The rules against this node's model, and its locked-memory limit for an RDMA fabric."""
    rendered = _rendered(plan)
    if rendered is None:
        return []
    facts = rendered.facts
    node = live_node_model(inventory)
    # what only the profile says of a fabric (that GPUDirect RDMA runs there) holds for its NICs on this node
    node = dataclasses.replace(node, nics={name: dataclasses.replace(
        nics, gpudirect=facts.node.nics[name].gpudirect if name in facts.node.nics else None)
        for name, nics in node.nics.items()})
    found = [_finding(f.rule, f.message, f.fix, " (this node)")
             for f in check(dataclasses.replace(facts, node=node, system=node.system)) if not f.assumption]
    limit = memlock_limit_kib()
    if facts.rdma and limit is not None:
        found.append(Finding("error", "rule locked-memory", f"rule locked-memory (this node): fabric {plan.fabric} "
                             f"registers memory for RDMA, and this node's hard limit for locked memory (ulimit -Hl) "
                             f"is {limit} KiB, so the ranks cannot raise it to unlimited",
                             "memlock unlimited for the job's user (limits.conf; Slurm PropagateResourceLimits)"))
    return found


def live_model_finding(inventory: dict[str, Any]) -> Finding:
    """What the rules saw of this node (`dlrun doctor`'s row): cores per NUMA node, GPUs with their NUMA node and
    compute capability, the driver, each RDMA fabric's NICs with theirs, the locked-memory limit."""
    node = live_node_model(inventory)
    gpus = ", ".join(f"{i}: NUMA {n if n is not None else '?'}" for i, n in enumerate(node.gpu_numa)) or "none"
    nics = "; ".join(f"{name}: {', '.join(f'{d} NUMA {n if n is not None else chr(63)}' for d, n in zip(n_.names, n_.numa))}"
                     for name, n_ in node.nics.items() if n_.rdma) or "no RDMA NICs"
    limit = memlock_limit_kib()
    return Finding("ok", "node-model", f"this node: {node.sockets} socket(s), {node.cores} cores over "
                   f"{node.numa_nodes} NUMA node(s); GPUs {gpus}"
                   + (f" ({node.gpu_model}, compute capability {node.compute_capability or '?'}, driver "
                      f"{node.driver or '?'})" if node.gpus else "")
                   + f"; {nics}; locked memory {'unlimited' if limit is None else f'{limit} KiB'} (ulimit -Hl)")
