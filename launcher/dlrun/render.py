"""Render a Plan into exactly what will run: scheduler ∘ launcher ∘ runtime ∘ workload command.

Pure functions of the plan: no I/O, no global state, so `--dry-run` shows precisely what `run` executes.
"""
from __future__ import annotations

from dataclasses import replace

from dlrun import jobcheck
from dlrun.errors import UsageError
from dlrun.job import RUN_DIR_VAR, RankCommand, RenderedJob
from dlrun.plan import Plan, fabric_for
from dlrun.runoptions import harness_args
from dlrun.registry import LAUNCHERS, RUNTIMES, SCHEDULERS
from dlrun.shell import Expand, SecretRef
from dlrun.staging import stage_argv
from dlrun.telemetry.launch import batch_lines, batch_sampler_argv
from dlrun.tfcnn_command import TF_CNN_BENCHMARKS_DIR, tf_cnn_benchmarks_command, tf_layout, tf_node_launch

__all__ = ["TF_CNN_BENCHMARKS_DIR", "memlock_argv", "render_job", "tf_cnn_benchmarks_command", "workload_command"]

#: The entry file of the in-container harness, per framework (its siblings sit beside it).
HARNESS = {"pytorch": "harness_pytorch.py", "tensorflow": "harness_tensorflow.py"}
#: PyTorch's own default collective timeout (gloo; NCCL before 2.2). A run's time limit shortens it, so that
#: a stopped rank ends the job with the surviving ranks' timeout error; it never lengthens it.
DEFAULT_COLLECTIVE_TIMEOUT_S = 1800


def collective_timeout_s(plan: Plan) -> int | None:
    limit = plan.scheduler_options.time_seconds()
    return None if limit is None else min(limit, DEFAULT_COLLECTIVE_TIMEOUT_S)


def harness_command(plan: Plan) -> list[str]:
    """The in-container command for one rank."""
    work = plan.workload
    if not work.trains:
        what = ["--benchmark", work.kind, "--min-bytes", str(work.min_bytes), "--max-bytes", str(work.max_bytes),
                "--size-factor", str(work.size_factor)]
        precision: list[str] = []
        data_workers = 0  # nothing to load
    else:
        what = ["--model", str(work.model), "--batch-size", str(plan.batch_size)]
        if plan.data is not None:  # --data DIR: train on it, not synthetic
            what += ["--data-dir", plan.data.mount]
        precision = ["--precision", plan.precision]
        data_workers = plan.data_workers
        what += training_args(plan)
    return [
        plan.image.python, f"{plan.image.harness_dir}/{HARNESS[plan.image.harness_framework or work.framework]}",
        *what,
        "--steps", str(plan.steps),
        "--warmup-steps", str(plan.warmup_steps),
        *precision,
        "--device", plan.device,
        "--threads", str(plan.threads_per_rank),
        "--expected-world-size", str(plan.world_size),
    ] + (["--dist", str(plan.dist)] if plan.dist in ("horovod", "fsdp", "dataparallel") else []) + (
        ["--data-workers", str(data_workers)] if data_workers else []) + harness_args(
        lambda name: getattr(plan, name)) + (
        ["--timeout-s", str(collective_timeout_s(plan))] if collective_timeout_s(plan) else [])


def training_args(plan: Plan) -> list[str]:
    """Gradient accumulation (the harness's global batch over every device), the checkpoint folder (the run
    directory's checkpoints/ unless --checkpoint-dir), and an LLM's measured matmul ceiling for its MFU."""
    args: list[str] = []
    if plan.grad_accum > 1:
        args += ["--global-batch-size", str(plan.global_batch_size)]
    if plan.checkpoint_every is not None:
        args += ["--checkpoint-dir", plan.checkpoint_dir or Expand(f"${{{RUN_DIR_VAR}}}/checkpoints")]
    if plan.matmul_gflops is not None and plan.workload.kind == "llm-pretraining":
        args += ["--matmul-gflops", f"{plan.matmul_gflops:.6g}"]
    return args


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
    'export DLRUN_RANK="${RANK:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${SLURM_PROCID:-${PMI_RANK:-0}}}}}"; '
    'export DLRUN_LOCAL_RANK="${LOCAL_RANK:-${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-${MPI_LOCALRANKID:-0}}}}"; '
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
            "--data-dir", plan.data.mount, "--steps", str(plan.steps), "--warmup-steps", str(plan.warmup_steps),
            "--expected-world-size", str(plan.world_size)]


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
        "OMP_NUM_THREADS": str(plan.threads_per_rank),
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
    env.update(plan.env)
    for name in plan.secret_names:  # by reference: the value comes from the job's environment
        env[name] = SecretRef(name)
    return env


def render_job(plan: Plan) -> RenderedJob:
    runtime = RUNTIMES.get(plan.runtime)
    launcher = LAUNCHERS.get(plan.launcher)
    scheduler = SCHEDULERS.get(plan.scheduler)
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
