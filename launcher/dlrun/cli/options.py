"""Options shared by several commands, and the few steps every command that resolves a plan takes."""
from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer



def _names(kind: str):
    """Shell completion of catalog names (`dlrun run res<TAB>`)."""
    def complete(incomplete: str) -> list[str]:
        try:
            names = getattr(load_catalog(), kind)
        except Exception:  # noqa: BLE001 - a broken site catalog must not break the user's shell
            return []
        return sorted(name for name in names if name.startswith(incomplete))
    return complete


JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]
Workload = Annotated[str, typer.Argument(help="Workload name (see `dlrun workloads list`).", show_default=False,
                                         autocompletion=_names("workloads"))]
ImageOpt = Annotated[Optional[str], typer.Option("--image", "-i", help="Image tag (default: the system's).",
                                                 autocompletion=_names("images"))]
SystemOpt = Annotated[str, typer.Option("--system", "-s", help="System profile (see `dlrun systems list`).",
                                        autocompletion=_names("systems"))]
NodesOpt = Annotated[Optional[int], typer.Option("--nodes", "-N", help="Number of nodes (default 1).")]
RanksOpt = Annotated[Optional[int], typer.Option("--ranks-per-node", "-r",
                                                 help="Ranks per node (default: GPUs per node, or 1 on CPU).")]
BatchOpt = Annotated[Optional[int], typer.Option("--batch-size", "-b", help="Batch size per rank.")]
GlobalBatchOpt = Annotated[Optional[int], typer.Option("--global-batch-size",
                                                       help="Total batch over all ranks (must divide evenly).")]
StepsOpt = Annotated[Optional[int], typer.Option("--steps", help="Timed training steps.")]
WarmupOpt = Annotated[Optional[int], typer.Option("--warmup-steps", help="Untimed warm-up steps before timing.")]
PrecisionOpt = Annotated[str, typer.Option("--precision", help="fp32 or amp (bf16 autocast on CPU, fp16 on GPU).")]
ThreadsOpt = Annotated[Optional[int], typer.Option("--threads", help="CPU threads per rank (default: cores/ranks).")]
LauncherOpt = Annotated[Optional[str], typer.Option("--launcher", help="Override the system's launcher.")]
RuntimeOpt = Annotated[Optional[str], typer.Option("--runtime", help="Override the container runtime.")]
SchedulerOpt = Annotated[Optional[str], typer.Option("--scheduler", help="Override the system's scheduler.")]
FabricOpt = Annotated[Optional[str], typer.Option("--fabric", help="Interconnect: ib, opa, roce or tcp.")]
DataOpt = Annotated[Optional[str], typer.Option("--data", help="Dataset directory, bound read-only at /data.")]
BindOpt = Annotated[Optional[list[str]], typer.Option("--bind", "-B",
                                                      help="Extra bind SRC[:DST][:ro|rw] (repeatable).")]
EnvOpt = Annotated[Optional[list[str]], typer.Option("--env", "-e",
                                                     help="Extra rank environment NAME=VALUE (repeatable).")]
SecretEnvOpt = Annotated[Optional[list[str]], typer.Option(
    "--secret-env", help="Pass the variable NAME from this environment to the ranks as a secret: its value is "
    "never written to a file, the store or the output (NAME=VALUE works too, but puts the value on the command "
    "line). Names like *_TOKEN, *_PASSWORD, *_KEY are secret without it (repeatable).")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the exact script that would run; run nothing.")]
StageDataOpt = Annotated[bool, typer.Option(
    "--stage-data", help="Copy the --data directory to node-local storage (/tmp) once per node before the ranks "
    "start, and train from the copy; bytes and seconds are stored with the run.")]
DataWorkersOpt = Annotated[Optional[int], typer.Option("--data-workers",
                                                      help="Data-loader workers per rank (default: the system's j).")]
AllocatorOpt = Annotated[str, typer.Option(
    "--allocator", help="Memory allocator of the PyTorch harness: auto (tcmalloc, else jemalloc, else glibc-tuned), "
    "tcmalloc, jemalloc, glibc-tuned or system.")]
DistOpt = Annotated[Optional[str], typer.Option(
    "--dist", help="How the PyTorch harness distributes training: ddp (DistributedDataParallel) or horovod "
    "(Horovod's DistributedOptimizer; needs an image with Horovod). Default: the system's (ddp for most; "
    "horovod under --launcher horovodrun).")]
PartitionOpt = Annotated[Optional[str], typer.Option("--partition", help="Batch partition/queue.")]
AccountOpt = Annotated[Optional[str], typer.Option("--account", help="Batch account/project.")]
TimeOpt = Annotated[Optional[str], typer.Option("--time", help="Job time limit: MINUTES, HH:MM:SS or D-HH:MM:SS.")]
ExclusiveOpt = Annotated[Optional[bool], typer.Option("--exclusive/--shared", help="Whole nodes (batch jobs).")]
LauncherArgOpt = Annotated[Optional[list[str]], typer.Option(
    "--launcher-arg", help="Extra launcher flag, passed as given (repeatable).")]
VariableUpdateOpt = Annotated[Optional[str], typer.Option(
    "--variable-update", help="tf_cnn_benchmarks: how gradients meet: parameter_server, distributed_replicated, "
    "collective_all_reduce, horovod, replicated, independent (default: horovod where the image has it, else "
    "parameter servers on several nodes).")]
AllReduceSpecOpt = Annotated[Optional[str], typer.Option(
    "--all-reduce-spec", help="tf_cnn_benchmarks --all_reduce_spec, e.g. xring, nccl/xring, pscpu:32k:xring, "
    "collective#2.")]
PsOpt = Annotated[Optional[int], typer.Option(
    "--ps", help="tf_cnn_benchmarks parameter servers, spread over the nodes (default 1 in parameter-server mode).")]
DataFormatOpt = Annotated[Optional[str], typer.Option(
    "--data-format", help="tf_cnn_benchmarks tensor layout: NCHW (GPU default) or NHWC (CPU default).")]
BenchmarkArgOpt = Annotated[Optional[list[str]], typer.Option(
    "--benchmark-arg", help="Extra tf_cnn_benchmarks flag --FLAG[=VALUE], passed quoted (repeatable).")]
SkipChecksOpt = Annotated[bool, typer.Option("--skip-checks", help="Run even if the pre-launch checks refuse.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v",
                                          help="Also print the raw DLRUN_RESULT line and every job line.")]

def _plan_options(workload: Workload, image: ImageOpt = None, system: SystemOpt = "localhost",
                  nodes: NodesOpt = None, ranks_per_node: RanksOpt = None, batch_size: BatchOpt = None,
                  global_batch_size: GlobalBatchOpt = None, steps: StepsOpt = None, warmup_steps: WarmupOpt = None,
                  precision: PrecisionOpt = "fp32", threads: ThreadsOpt = None, launcher: LauncherOpt = None,
                  runtime: RuntimeOpt = None, scheduler: SchedulerOpt = None, fabric: FabricOpt = None,
                  data: DataOpt = None, bind: BindOpt = None, env: EnvOpt = None,
                  secret_env: SecretEnvOpt = None, data_workers: DataWorkersOpt = None,
                  stage_data: StageDataOpt = False, allocator: AllocatorOpt = "auto",
                  dist: DistOpt = None, partition: PartitionOpt = None, account: AccountOpt = None, time: TimeOpt = None,
                  exclusive: ExclusiveOpt = None, launcher_arg: LauncherArgOpt = None,
                  variable_update: VariableUpdateOpt = None, all_reduce_spec: AllReduceSpecOpt = None,
                  ps: PsOpt = None, data_format: DataFormatOpt = None,
                  benchmark_arg: BenchmarkArgOpt = None) -> None:
    """The options every command that resolves a plan takes (`run`, `plan`): written once, here."""


def takes_plan_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give `command(own options..., **options)` the plan options too; they arrive in `options`."""
    shared = list(inspect.signature(_plan_options, eval_str=True).parameters.values())
    own = [p for p in inspect.signature(command, eval_str=True).parameters.values()
           if p.kind is not inspect.Parameter.VAR_KEYWORD]
    command.__signature__ = inspect.Signature([*shared, *own])  # type: ignore[attr-defined]
    return command


# `run` and `plan` take the same options; these are the ones whose CLI name differs from resolve_plan's.
PLAN_NAMES = {"threads": "threads_per_rank", "data": "data_dir", "bind": "binds", "time": "time_limit",
              "launcher_arg": "launcher_args", "benchmark_arg": "benchmark_args"}
NOT_PLAN: set[str] = set()


def load_catalog():
    """The catalogs, with this machine as system `localhost` and its Python as image `host`."""
    from dlrun.catalog import load_catalog as load
    from dlrun.probe.host import probe_host

    return load(host=probe_host())


def secret_env_specs(specs: list[str] | None, environ: dict[str, str]) -> tuple[list[str], list[str]]:
    """`--secret-env` values -> (NAME=VALUE entries for the plan's env, the names): a bare NAME takes its
    value from dlrun's environment, where it must be set."""
    from dlrun.errors import UsageError

    entries, names = [], []
    for spec in specs or []:
        name, sep, value = spec.partition("=")
        if not sep:
            if name not in environ:
                raise UsageError(f"--secret-env {name}: {name} is not set in dlrun's environment; valid: export "
                                 f"{name} first, or --secret-env {name}=VALUE")
            value = environ[name]
        entries.append(f"{name}={value}")
        names.append(name)
    return entries, names


def resolve(options: dict[str, Any]):
    """Resolve a plan from a command's parameters (its `locals()` on entry), with this site's images."""
    from dlrun.images.verify import with_local_image
    from dlrun.plan import resolve_plan

    kwargs = {PLAN_NAMES.get(name, name): value for name, value in options.items() if name not in NOT_PLAN}
    entries, names = secret_env_specs(kwargs.pop("secret_env", None), dict(os.environ))
    kwargs["env"] = [*(kwargs.get("env") or []), *entries]
    return resolve_plan(load_catalog(), kwargs.pop("workload"), local_image=with_local_image, secret_env=names,
                        **kwargs)
