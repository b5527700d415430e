"""Every rendered job held to a model of its node (dlrun.nodemodel) before anyone's allocation is spent.

`examine` builds the job's facts from the plan, the launch dlrun.render rendered and the backends'
declarations, and runs the rules (`rules.RULES`): refusals go to the pre-launch checks (exit 2; `--skip-checks`
turns them into warnings), assumptions (what only the hardware can tell) into the job as comments and into the
run's record. `annotated` writes them, with the node model's account of binding and GPUDirect, into the script."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from dlrun.job import Launch, RankCommand, RenderedJob, RuleFinding
from dlrun.jobcheck.facts import MEMLOCK_ARG0, ROOT_ONLY_VARS, JobFacts, bound_ranks, image_facts, thread_count
from dlrun.jobcheck.rules import RULES, check
from dlrun.launchers.base import numa_map
from dlrun.nodemodel import node_model, rank_affinity
from dlrun.plan import Plan, gpudirect_for
from dlrun.registry import LAUNCHERS, RUNTIMES, SCHEDULERS
from dlrun.tfcnn_command import tf_layout

__all__ = ["MEMLOCK_ARG0", "RULES", "JobFacts", "annotated", "check", "examine", "job_facts"]

#: How the comments dlrun writes into a job begin (after the header's `# workload=` line).
NOTE_PREFIX = "# dlrun: "


def _one_process_all_gpus(plan: Plan) -> bool:
    tf_local = plan.image.harness_framework is None and plan.workload.kind != "command" and tf_layout(plan) != "per-rank"
    return plan.device == "cuda" and (plan.dist == "dataparallel" or tf_local)


def job_facts(plan: Plan, launch: Launch, inner: RankCommand, wrapped: RankCommand) -> JobFacts:
    """The facts of a rendered job: `inner` is the rank's command inside the container, `wrapped` after the
    runtime wrapped it, `launch` what starts every rank."""
    launcher, runtime, scheduler = LAUNCHERS.get(plan.launcher), RUNTIMES.get(plan.runtime), SCHEDULERS.get(plan.scheduler)
    env: Mapping[str, str] = {**launch.env, **inner.env}
    whole = _one_process_all_gpus(plan)
    processes = 1 if whole else plan.ranks_per_node  # torchrun: one launcher process per node, its ranks bound alike
    bound, by = ((None,) * processes, "none") if whole else bound_ranks(
        plan, [str(w) for w in launch.argv], numa_map(plan), launcher.binds_resource_sets)
    affinity = rank_affinity(node_model(plan.system), plan.fabric, plan.device, plan.dist)
    reference = runtime.node_reference(plan)
    loads_mpi = (launcher.ranks_load_mpi or plan.dist == "horovod" or plan.workload.kind == "nccl-tests"
                 or plan.image.framework != "pytorch")
    return JobFacts(
        system=plan.system.name, node=node_model(plan.system), device=plan.device, fabric=plan.fabric,
        rdma=plan.fabric != "tcp", ranks_per_node=processes,
        threads=thread_count(env, [str(w) for w in inner.argv]), bound=bound[:processes], bound_by=by,
        bound_to=affinity.by if affinity else "gpu",
        one_process_all_gpus=whole, env=env,
        memlock_raised=MEMLOCK_ARG0 in [str(w) for w in inner.argv],
        reference=reference.text, reference_kind=reference.kind, runs_elsewhere=not scheduler.runs_here,
        whole_nodes=bool(plan.scheduler_options.exclusive) or scheduler.runs_image,
        runs_as_root=plan.runs_as_root, root_vars=tuple(n for n in ROOT_ONLY_VARS if n in launch.env),
        loads_mpi=loads_mpi, joins_launcher_session=runtime.joins_launcher_session(plan, wrapped),
        image=image_facts(plan))


def binding_note(facts: JobFacts) -> str:
    node = facts.node
    if facts.one_process_all_gpus:
        return (f"node model ({node.origin}): one process per node drives all {node.gpus} GPUs, so it is bound to "
                f"no one socket; {facts.threads} threads on {node.cores} cores")
    if facts.bound_by == "none" or None in facts.bound:
        return (f"node model ({node.origin}): {facts.ranks_per_node} process(es) per node share its {node.cores} "
                f"cores, {facts.threads} threads each")
    groups: dict[int, int] = {}
    for numa in facts.bound:
        groups[numa] = groups.get(numa, 0) + 1  # type: ignore[index]
    where = "; ".join(f"{count} on NUMA node {numa} (socket {node.socket_of_numa(numa)}, "
                      f"{node.cores_of_numa(numa)} cores)" for numa, count in sorted(groups.items()))
    who = "the launcher's resource sets" if facts.bound_by == "launcher" else "dlrun's affinity wrapper"
    to = ("their GPU's NUMA node" if facts.bound_to == "gpu" else
          f"the {facts.fabric} NIC's NUMA node (the profile does not place the GPUs; it places the NIC)")
    return f"node model ({node.origin}): ranks bound by {who} to {to}: {where}; {facts.threads} threads per rank"


def examine(plan: Plan, launch: Launch, inner: RankCommand, wrapped: RankCommand) -> tuple[JobFacts, list[RuleFinding]]:
    facts = job_facts(plan, launch, inner, wrapped)
    return facts, check(facts)


def annotated(job: RenderedJob, plan: Plan, facts: JobFacts, findings: list[RuleFinding]) -> RenderedJob:
    """The job with the node model's account and every assumption as comments after its header, and the
    findings attached (the pre-launch checks refuse on them, the run records the assumptions)."""
    notes = [binding_note(facts), *gpudirect_for(plan).notes]
    notes += [f"assumes ({f.rule}): {f.message}" for f in findings if f.assumption]
    lines = job.script.split("\n")
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("# workload=")), 1)
    comments = [NOTE_PREFIX + " ".join(note.split()) for note in notes]
    script = "\n".join([*lines[:at], *comments, *lines[at:]])
    return dataclasses.replace(job, script=script, findings=tuple(findings), facts=facts)
