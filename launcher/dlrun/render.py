"""Render a Plan into exactly what will run: scheduler ∘ launcher ∘ runtime ∘ workload command.

Pure functions of the plan: no I/O, no global state, so `--dry-run` shows precisely what `run` executes.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from dlrun import __version__
from dlrun.plan import Plan

HARNESS = {"pytorch": "harness_pytorch.py"}
RUN_DIR_VAR = "DLRUN_RUN_DIR"


@dataclass(frozen=True)
class RankCommand:
    """One rank's command and the environment every rank must see.

    Contract for container runtimes: `env` must be visible inside the container with these values;
    `passthrough` names (and names starting with `passthrough_prefixes`) are set per rank by the launcher
    on the host (rank ids, PMIx contact, CUDA_VISIBLE_DEVICES) and must be inherited from the host process
    as they are. Runtimes that run inside the launcher (pyxis) return flags for it in `launcher_args`.
    """

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    passthrough: tuple[str, ...] = ()
    passthrough_prefixes: tuple[str, ...] = ()
    launcher_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class RenderedJob:
    script: str                 # bash text; the executor runs exactly this
    submit_argv: list[str]      # how to start the script (relative to the run directory)
    scheduler: str
    rank_log_pattern: str       # where per-rank stdout lands, relative to the run directory
    files: dict[str, str] = field(default_factory=dict)  # extra files to stage in the run directory
    submit_stdin: str | None = None  # a staged file the submit command reads on stdin (`bsub < run.sh`)


def harness_command(plan: Plan) -> list[str]:
    """The in-container command for one rank."""
    work = plan.workload
    if work.kind == "allreduce":
        what = ["--benchmark", "allreduce", "--min-bytes", str(work.min_bytes), "--max-bytes", str(work.max_bytes),
                "--size-factor", str(work.size_factor)]
        precision: list[str] = []
        data_workers = 0  # nothing to load
    else:
        what = ["--model", str(work.model), "--batch-size", str(plan.batch_size)]
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
        ["--allocator", plan.allocator] if plan.allocator != "auto" else [])


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
    return env


def fabric_for(plan: Plan):
    """The fabric settings of a plan: its system's configuration of that fabric, rendered."""
    from dlrun.fabrics import fabric_settings

    return fabric_settings(plan.fabric, plan.system.fabric_config.get(plan.fabric), device=plan.device)


class Expand(str):
    """A word dlrun itself writes that must expand in the shell (e.g. `${DLRUN_RUN_DIR}/logs`).

    Never built from user input: everything else is single-quoted by `quote`.
    """


class Concat(str):
    """One shell word made of parts, each quoted its own way: `Expand` parts expand, the rest stays literal.
    E.g. Concat(Expand("--mounts=${DLRUN_RUN_DIR}"), ",", user_path)."""

    parts: tuple[str, ...]

    def __new__(cls, *parts: str) -> "Concat":
        word = super().__new__(cls, "".join(parts))
        word.parts = tuple(part for part in parts if part)
        return word


def quote(word: str) -> str:
    if isinstance(word, Concat):
        return "".join(quote(part) for part in word.parts) or "''"
    if isinstance(word, Expand):
        return f'"{word}"'
    return shlex.quote(word)


def join(argv: list[str]) -> str:
    return " ".join(quote(word) for word in argv)


def script_header(plan: Plan, title: str) -> list[str]:
    return [
        "#!/usr/bin/env bash",
        # Values are single-quoted on purpose (they are data); `bash -c` programs expand later, per rank.
        "# shellcheck disable=SC2016",
        f"# Generated by dlrun {__version__}: {title}",
        f"# workload={plan.workload.name} model={plan.workload.label} image={plan.image.name} "
        f"system={plan.system.name} nodes={plan.nodes} ranks/node={plan.ranks_per_node}",
    ]


def render_job(plan: Plan) -> RenderedJob:
    from dlrun.registry import LAUNCHERS
    from dlrun.registry import RUNTIMES
    from dlrun.registry import SCHEDULERS

    runtime = RUNTIMES.get(plan.runtime)
    launcher = LAUNCHERS.get(plan.launcher)
    scheduler = SCHEDULERS.get(plan.scheduler)
    for backend in (scheduler, launcher, runtime):
        backend.check(plan)
    rank = RankCommand(argv=workload_command(plan), env=rank_environment(plan),
                       passthrough=launcher.rank_env_names, passthrough_prefixes=launcher.rank_env_prefixes)
    rank = launcher.prepare(plan, rank)
    if not scheduler.runs_image:  # a Kubernetes pod is the container; no runtime wraps the command
        rank = runtime.wrap(plan, rank)
    launch = launcher.wrap(plan, rank)
    return scheduler.render(plan, launch)
