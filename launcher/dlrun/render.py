"""Render a Plan into exactly what will run: scheduler ∘ launcher ∘ runtime ∘ workload command.

Pure functions of the plan: no I/O, no global state, so `--dry-run` shows precisely what `run` executes.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from dlrun import jobcheck
from dlrun.errors import UsageError
from dlrun.harness.harness_contract import (KNOB_SOURCES_ENV, knob_sources_text, local_rank_variables,
                                            rank_variables, shell_first_set)
from dlrun.job import RankCommand, RenderedJob
from dlrun.plan import Plan, fabric_for
from dlrun.runoptions import RunOption, harness_args, rank_env
from dlrun.registry import LAUNCHERS, RUNTIMES, SCHEDULERS
from dlrun.shell import Expand, SecretRef
from dlrun.staging import stage_argv
from dlrun.telemetry.launch import batch_lines, batch_sampler_argv
from dlrun.tfcnn_command import TF_CNN_BENCHMARKS_DIR, tf_cnn_benchmarks_command, tf_layout, tf_node_launch

__all__ = ["TF_CNN_BENCHMARKS_DIR", "memlock_argv", "render_job", "tf_cnn_benchmarks_command", "workload_command"]

#: The entry file of the in-container harness, per framework (its siblings sit beside it).
HARNESS = {"pytorch": "harness_pytorch.py", "tensorflow": "harness_tensorflow.py"}
#: The harness's arguments that no run option declares (where the plan runs it, an LLM's measured ceiling): the
#: flag, the Plan attribute, the harness commands that take it.
DERIVED_HARNESS_ARGS = (("--device", "device", ("training", "collective")),
                        ("--expected-world-size", "world_size", ("training", "collective", "storage")),
                        ("--matmul-gflops", "matmul_gflops", ("training",)))


def option_value(plan: Plan, opt: RunOption) -> Any:
    """What the plan hands on of one option (dlrun.runoptions: its `harness_value`, else its field, else the
    plan's harness-only options)."""
    if opt.harness_value:
        return getattr(plan, opt.harness_value)
    return getattr(plan, opt.field) if opt.field else plan.harness_options.get(opt.name)


def harness_args_of(plan: Plan, kind: str) -> list[str]:
    """Every declared option's flag for harness commands of `kind`, then the derived ones."""
    derived = [[flag, f"{value:.6g}" if isinstance(value, float) else str(value)]
               for flag, name, kinds in DERIVED_HARNESS_ARGS
               if kind in kinds and (value := getattr(plan, name)) is not None]
    return harness_args(lambda opt: option_value(plan, opt), kind) + [word for pair in derived for word in pair]


def harness_command(plan: Plan) -> list[str]:
    """The in-container command for one rank: the harness's entry, what the workload is (a model to train, or
    a collective's message sizes), and every option that reaches it."""
    work = plan.workload
    if not work.trains:
        what = ["--benchmark", work.kind, "--min-bytes", str(work.min_bytes), "--max-bytes", str(work.max_bytes),
                "--size-factor", str(work.size_factor)]
    else:
        what = ["--model", str(work.model)]
    entry = f"{plan.image.harness_dir}/{HARNESS[plan.image.harness_framework or work.framework]}"
    return [plan.image.python, entry, *what, *harness_args_of(plan, "training" if work.trains else "collective")]


def nccl_tests_command(plan: Plan) -> list[str]:
    """The image's own nccl-tests binary (built with MPI=1 and copied to its `nccl_tests.path`), one process and
    one GPU (-g 1) per rank, over the workload's message sizes; -c 1 checks every size's values (#wrong)."""
    work = plan.workload
    root = getattr(getattr(plan.image, "nccl_tests", None), "path", None)
    if root is None:  # resolve_plan refuses such images; a hand-built plan gets the same answer here
        raise UsageError(f"image {plan.image.name!r} has no nccl-tests, which workload {work.name!r} runs")
    return [f"{root}/{work.nccl_test}", "-b", str(work.min_bytes), "-e", str(work.max_bytes),
            "-f", str(work.size_factor), "-g", "1", "-t", "1", "-n", str(plan.steps), "-w", str(plan.warmup_steps),
            "-c", "1"]


#: In front of a site's own command (`kind: command`): the rank and local rank from whichever launcher started
#: it, and, for `run_per: node`, every rank but the node's first leaves. Constant text; the command follows.
COMMAND_PRELUDE = (
    f'export DLRUN_RANK="{shell_first_set(rank_variables())}"; '
    f'export DLRUN_LOCAL_RANK="{shell_first_set(local_rank_variables())}"; '
)
PER_NODE_GUARD = '[ "$DLRUN_LOCAL_RANK" = 0 ] || exit 0; '
COMMAND_ARG0 = "dlrun-command"


def command_argv(plan: Plan) -> list[str]:
    """`bash -c PRELUDE+COMMAND dlrun-command`: the site's command as its catalog gives it (shell text)."""
    work = plan.workload
    guard = PER_NODE_GUARD if work.run_per == "node" else ""
    return ["bash", "-c", COMMAND_PRELUDE + guard + str(work.command), COMMAND_ARG0]


def command_environment(plan: Plan) -> dict[str, str]:
    """The plan's variables a site's command sees (dlrun.catalog.commands.COMMAND_VARIABLES)."""
    return {"DLRUN_WORLD_SIZE": str(plan.world_size), "DLRUN_NODES": str(plan.nodes),
            "DLRUN_RANKS_PER_NODE": str(plan.ranks_per_node), "DLRUN_BATCH_SIZE": str(plan.batch_size),
            "DLRUN_STEPS": str(plan.steps), "DLRUN_WARMUP_STEPS": str(plan.warmup_steps),
            "DLRUN_PRECISION": plan.precision, "DLRUN_DEVICE": plan.device,
            "DLRUN_THREADS": str(plan.threads_per_rank),
            "DLRUN_DATA": plan.data.mount if plan.data is not None else ""}


#: The harness's storage reader (standard library; shipped with the PyTorch harness).
STORAGE_READER = "harness_pytorch_storage.py"


def storage_command(plan: Plan) -> list[str]:
    """The storage reader over the --data directory as the ranks see it (a plan without data is refused)."""
    if plan.data is None:
        raise UsageError(f"workload {plan.workload.name!r} reads a directory; valid: --data DIR")
    return [plan.image.python, f"{plan.image.harness_dir}/{STORAGE_READER}", "--test", str(plan.workload.storage_test),
            *harness_args_of(plan, "storage")]


def workload_command(plan: Plan) -> list[str]:
    """One rank's command: nccl-tests workloads run the image's nccl-tests, command workloads the site's own
    command; otherwise the image's framework decides which benchmark code runs the workload."""
    if plan.workload.kind == "command":
        return command_argv(plan)
    if plan.workload.kind == "nccl-tests":
        return nccl_tests_command(plan)
    if plan.workload.kind == "storage":
        return storage_command(plan)
    if plan.image.harness_framework is None:
        return tf_cnn_benchmarks_command(plan)
    return harness_command(plan)


def rank_environment(plan: Plan) -> dict[str, str]:
    env = {
        **rank_env(lambda opt: option_value(plan, opt)),
        "MASTER_ADDR": "127.0.0.1" if plan.nodes == 1 else Expand("${DLRUN_MASTER_ADDR}"),
        # The local executor picks a free port so that parallel runs on one host do not collide.
        "MASTER_PORT": Expand(f"${{DLRUN_MASTER_PORT:-{plan.master_port}}}"),
        "PYTHONUNBUFFERED": "1",
    }
    if plan.workload.kind == "command":
        env.update(command_environment(plan))
    env.update(fabric_for(plan).env)
    if plan.device == "cuda" and plan.fabric != "tcp":
        # The executor reads NCCL's own account of the transport it chose (NET/IB vs NET/Socket).
        env.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"})
    told = knob_sources_told(plan.knob_sources)
    if told:  # where a rendered knob's value came from, which the harness records with it
        env[KNOB_SOURCES_ENV] = told
    env.update(plan.env)
    for name in plan.secret_names:  # by reference: the value comes from the job's environment
        env[name] = SecretRef(name)
    return env


def knob_sources_told(sources: dict[str, str]) -> str:
    """What the harness cannot infer of the knobs' sources: it counts a flag on its command line as asked for
    and a knob left out as the default, so it is told of the flags dlrun renders itself (--threads always, a
    tuned value)."""
    told = {name: source for name, source in sources.items() if source == "tuned" or name == "threads"}
    return knob_sources_text(told) if told else ""


def render_job(plan: Plan) -> RenderedJob:
    runtime = RUNTIMES.get(plan.runtime)
    launcher = LAUNCHERS.get(plan.launcher)
    scheduler = SCHEDULERS.get(plan.scheduler)
    scheduler.check_nodelist(plan)
    scheduler.check(plan)
    if plan.secret_names and scheduler.runs_image:
        raise UsageError(f"scheduler {plan.scheduler} would carry the values of {', '.join(sorted(plan.secret_names))} "
                         "in its job manifest; valid: a secret the site provides to the pods (a Kubernetes Secret), "
                         "or another scheduler")
    launcher.check(plan, scheduler)
    runtime.check(plan)
    rank = RankCommand(argv=workload_command(plan), env=rank_environment(plan),
                       passthrough=launcher.rank_env_names, passthrough_prefixes=launcher.rank_env_prefixes)
    rank = with_memlock(plan, launcher.prepare(plan, rank))
    inner = rank
    if not scheduler.runs_image:  # a Kubernetes pod is the container; no runtime wraps the command
        rank = runtime.wrap(plan, rank)
    if plan.image.harness_framework is None and plan.workload.kind != "command" and tf_layout(plan) != "per-rank":
        launch = tf_node_launch(plan, rank, scheduler)  # one process per node (dlrun.tfcnn_command)
    else:
        launch = launcher.wrap(plan, rank, scheduler)
    if plan.data is not None and plan.data.staged_copy:  # --stage-data: each node copies the dataset first
        if scheduler.runs_image:
            raise UsageError(f"--stage-data with scheduler {plan.scheduler}: its pods start the image themselves "
                             "and run no step before it; valid: a scheduler that runs a job script (local, "
                             "slurm, pbs, lsf)")
        stage = stage_argv(plan.data.path, plan.data.staged_copy)
        launch = replace(launch, setup=[*scheduler.once_per_node(plan, stage), *launch.setup])
    if plan.telemetry_period and scheduler.batch and not scheduler.runs_image:  # local: the executor starts it
        start = scheduler.per_node_background(plan, batch_sampler_argv(plan.telemetry_period))
        if start:
            launch = replace(launch, setup=[*batch_lines(start), *launch.setup])
    facts, findings = jobcheck.examine(plan, launch, inner, rank)  # the rules of the node model
    return jobcheck.annotated(scheduler.render(plan, launch), plan, facts, findings)


# In front of every rank of an RDMA fabric, inside the container: RDMA registers (pins) memory, so locked memory
# must be unlimited there; a container's limit is the node's (or its engine's), raised here as far as the hard
# limit allows, and a rank that cannot have it stops with that one line instead of NCCL or MPI failing later.
MEMLOCK_SCRIPT = (
    'ulimit -l unlimited 2>/dev/null; l=$(ulimit -l); if [ "$l" != unlimited ]; then '
    "echo \"dlrun: locked memory is limited to $l KiB here; fabric @FABRIC@ registers memory for RDMA and needs it "
    "unlimited: raise the memlock limit of the nodes (limits.conf, PropagateResourceLimits of Slurm, the memlock "
    "ulimit of a container engine)\" >&2; exit 1; fi; exec \"$@\""
)


def memlock_argv(plan: Plan) -> list[str]:
    """`bash -c MEMLOCK dlrun-memlock` for RDMA fabrics; nothing on plain TCP."""
    if not fabric_for(plan).ipc_lock:
        return []
    return ["bash", "-c", MEMLOCK_SCRIPT.replace("@FABRIC@", plan.fabric), jobcheck.MEMLOCK_ARG0]


def with_memlock(plan: Plan, rank: RankCommand) -> RankCommand:
    return rank.with_argv(memlock_argv(plan) + rank.argv)
