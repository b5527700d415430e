"""Render a Plan into exactly what will run: scheduler ∘ launcher ∘ runtime ∘ workload command.

Pure functions of the plan: no I/O, no global state, so `--dry-run` shows precisely what `run` executes.
"""
from __future__ import annotations

from dataclasses import replace

from dlrun.errors import UsageError
from dlrun.job import RankCommand, RenderedJob
from dlrun.plan import DATA_MOUNT, Plan, fabric_for
from dlrun.registry import LAUNCHERS, RUNTIMES, SCHEDULERS
from dlrun.shell import Expand, SecretRef
from dlrun.staging import stage_argv

#: The entry file of the in-container harness, per framework (its siblings sit beside it).
HARNESS = {"pytorch": "harness_pytorch.py"}
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
        what = ["--benchmark", "allreduce", "--min-bytes", str(work.min_bytes), "--max-bytes", str(work.max_bytes),
                "--size-factor", str(work.size_factor)]
        precision: list[str] = []
        data_workers = 0  # nothing to load
    else:
        what = ["--model", str(work.model), "--batch-size", str(plan.batch_size)]
        if any(bind.target == DATA_MOUNT for bind in plan.binds):  # --data DIR: train on it, not synthetic
            what += ["--data-dir", DATA_MOUNT]
        precision = ["--precision", plan.precision]
        data_workers = plan.data_workers
    return [
        plan.image.python, f"{plan.image.harness_dir}/{HARNESS[work.framework]}", *what,
        "--steps", str(plan.steps),
        "--warmup-steps", str(plan.warmup_steps),
        *precision,
        "--device", plan.device,
        "--threads", str(plan.threads_per_rank),
        "--expected-world-size", str(plan.world_size),
    ] + (["--data-workers", str(data_workers)] if data_workers else []) + (
        ["--allocator", plan.allocator] if plan.allocator != "auto" else []) + (
        ["--timeout-s", str(collective_timeout_s(plan))] if collective_timeout_s(plan) else [])


TF_CNN_BENCHMARKS_DIR = "/opt/tensorflow-benchmarks"  # where our TensorFlow images clone tensorflow/benchmarks


def tf_cnn_benchmarks_command(plan: Plan) -> list[str]:
    """TensorFlow images run tf_cnn_benchmarks (the benchmark code the seeds' TensorFlow numbers come from)."""
    root = next((b.path for b in getattr(plan.image, "benchmarks", []) if b.name == "tf_cnn_benchmarks"),
                TF_CNN_BENCHMARKS_DIR)
    gpu = plan.device == "cuda"
    argv = [
        plan.image.python, f"{root}/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py",
        f"--model={plan.workload.tf_cnn_model}",
        f"--batch_size={plan.batch_size}",
        f"--num_batches={plan.steps}",
        f"--num_warmup_batches={plan.warmup_steps}",
        "--display_every=10",
        f"--device={'gpu' if gpu else 'cpu'}",
        f"--data_format={'NCHW' if gpu else 'NHWC'}",
        "--num_gpus=1",  # one device per rank; ranks come from the launcher
        f"--variable_update={'horovod' if plan.world_size > 1 else 'replicated'}",
    ]
    if plan.world_size > 1 and gpu:
        argv.append("--horovod_device=gpu")
    if plan.precision == "amp":
        argv.append("--use_fp16=True")
    if not gpu:
        argv += [f"--num_intra_threads={plan.threads_per_rank}", "--num_inter_threads=1"]
    if plan.workload.dataset == "imagenet":
        argv += ["--data_name=imagenet", "--data_dir=/data"]
    return argv


def workload_command(plan: Plan) -> list[str]:
    """One rank's command: the image's framework decides which benchmark code runs the workload."""
    if plan.image.framework == "tensorflow":
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
    rank = launcher.prepare(plan, rank)
    if not scheduler.runs_image:  # a Kubernetes pod is the container; no runtime wraps the command
        rank = runtime.wrap(plan, rank)
    launch = launcher.wrap(plan, rank, scheduler)
    if plan.stage_data:  # --stage-data: each node copies the dataset before the launch
        if scheduler.runs_image:
            raise UsageError(f"--stage-data with scheduler {plan.scheduler}: its pods start the image themselves "
                             "and run no step before it; valid: a scheduler that runs a job script (local, "
                             "slurm, pbs, lsf)")
        dest = next(b.source for b in plan.binds if b.target == DATA_MOUNT)
        launch = replace(launch, setup=[*scheduler.once_per_node(plan, stage_argv(plan.stage_data, dest)),
                                        *launch.setup])
    return scheduler.render(plan, launch)
