"""Every option of a run (`dlrun run`, `dlrun plan`, an experiment's point), declared once.

A declaration says what the option is called on the command line, its type and validation, its default and
where a missing value comes from, its help text, the `Plan` field it sets, the comparability-key fields it
decides, the experiment axis that may set it, which resolver of `dlrun.plan` consumes it, and how the
in-container harness receives it. From this table:

- `dlrun.cli.options` builds the typer options of `run` and `plan` (`--help` shows each default or its source);
- `dlrun.plan.resolve_plan` takes exactly these names, checks them generically (type, minimum, choices) and
  hands each to its resolver;
- `dlrun.catalog.experiment_points.Point.plan_options` maps an experiment point's fields through `axis`;
- `dlrun.results.key.KEY_FIELDS` lists the fields the options decide (`key`) beside those no option sets;
- `dlrun.render` renders every option's hop to the job generically: a `harness_flag` on the harness's command
  line (and a harness-only option, one without a Plan field, from `Plan.harness_options`), an `env_var` in the
  ranks' environment; the scheduler's options reach the batch script through the scheduler backend.

`tests/test_run_options.py` derives all five from this table and fails when one drifts. Adding an option is one
declaration here, its resolver (or a `harness_flag`), and tests; ARCHITECTURE.md shows a worked example.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dlrun.errors import UsageError, unknown_name
from dlrun.harness.harness_contract import DEFAULT_PRECISION, KNOBS, PRECISIONS
from dlrun.harness.harness_node import ARCHES
from dlrun.registry import LAUNCHERS, RUNTIMES, SCHEDULERS

#: The resolvers of dlrun.plan, in the order they run; `RunOption.resolver` names one of them.
RESOLVERS = ("names", "layout", "batch", "data", "environment", "backends", "fabric", "scheduler", "framework",
             "training", "telemetry", "harness")


@dataclass(frozen=True)
class RunOption:
    """One run option. `name` is the keyword `resolve_plan` takes; the long flag is `--name` with dashes."""

    name: str
    #: `--help` text: what the option does (the default is appended from `default`/`default_from`).
    help: str
    #: int, float, str, bool (a flag) or list (repeatable, str items).
    type: type = str
    #: The value when the option is not given. None: decided by the resolver from `default_from`.
    default: Any = None
    #: Where a missing value comes from, said in `--help` ("the system's", "GPUs per node, or 1 on CPU").
    default_from: str = ""
    #: Other spellings: a short flag, or the full `--on/--off` pair of a three-state flag.
    aliases: tuple[str, ...] = ()
    #: Accepted values (checked before any resolver runs).
    choices: tuple[str, ...] = ()
    #: Smallest accepted integer.
    minimum: int | None = None
    #: The `Plan` field this option sets (None: it steers resolution only, e.g. --global-batch-size).
    field: str | None = None
    #: Fields of the comparability key (dlrun.results.key) whose value this option decides.
    key: tuple[str, ...] = ()
    #: The experiment point's field (dlrun.catalog.experiment_points.Point) that may set this option.
    axis: str | None = None
    #: The resolver of dlrun.plan that consumes it (one of RESOLVERS).
    resolver: str = "framework"
    #: How the option reaches the in-container harness: rendered generically (dlrun.render) as
    #: `HARNESS_FLAG VALUE` on the command line of the harness commands of `harness_kinds` (a bool: the flag
    #: alone), the value being the Plan's `harness_value` (an attribute or property; default: `field`, else the
    #: plan's `harness_options[name]`), left out while it is one of `harness_omit` (default: `default`).
    harness_flag: str | None = None
    harness_kinds: tuple[str, ...] = ("training", "collective")
    harness_value: str | None = None
    harness_omit: tuple[Any, ...] | None = None
    #: The rank's environment variable the option sets (the plan's `field` value), rendered by dlrun.render.
    env_var: str | None = None
    #: Shell completion from this catalog (`workloads`, `images`, `systems`).
    completion: str | None = None
    #: The value's placeholder in `--help`.
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def flags(self) -> tuple[str, ...]:
        if self.aliases and "/" in self.aliases[0]:
            return self.aliases  # "--exclusive/--shared": typer's on/off pair replaces the plain flag
        return (self.flag, *self.aliases)

    def reaches(self) -> str:
        """How the option reaches the job, in words."""
        hops = [f"the harness's {self.harness_flag}"] if self.harness_flag else []
        hops += [f"the ranks' {self.env_var}"] if self.env_var else []
        if self.field == "scheduler_options":
            hops.append("the batch script's scheduler options")
        elif not hops and self.field:
            hops.append(f"Plan.{self.field}, which the {self.resolver} resolver decides and a backend renders")
        return "; ".join(hops) or f"the {self.resolver} resolver (it steers resolution)"

    def omitted(self, value: Any) -> bool:
        """Whether `value` is rendered as nothing on the harness's command line (the harness's own default)."""
        if self.type is bool:
            return not value
        return value is None or value in (self.harness_omit if self.harness_omit is not None else (self.default,))

    def help_text(self) -> str:
        """The help line with where its default comes from (typer shows literal defaults itself)."""
        if self.default_from:
            return f"{self.help} [default: {self.default_from}]"
        return self.help


def _opt(name: str, help: str, **kw: Any) -> RunOption:
    return RunOption(name=name, help=help, **kw)


_BACKEND = "backends"
#: The harness commands (dlrun.render): a training step, a collective sweep, the storage reader.
_TRAINING, _EVERY = ("training",), ("training", "collective", "storage")
#: A knob's values (dlrun.tune): auto leaves the choice to the tuner's decision for this machine, else the default.
_KNOB = ("auto", "on", "off")
_TUNED = "auto: the tuner's choice for this machine, else {}."
RUN_OPTIONS: tuple[RunOption, ...] = (
    # names: the catalog entries a run is made of
    _opt("image", "Image tag (see `dlrun images list`).", default_from="the system's default image",
         aliases=("-i",), field="image", key=("image_digest", "framework", "framework_version"), axis="image",
         resolver="names", completion="images", metavar="TAG"),
    _opt("system", "System profile (see `dlrun systems list`).",
         default_from="$DLRUN_SYSTEM, else `system:` in config.yaml, else the system whose `hostnames` match this "
                      "host, else localhost",
         aliases=("-s",), field="system", key=("system",), axis="system", resolver="names", completion="systems",
         metavar="NAME"),
    _opt("arch", "The image's architecture. One other than the system's runs emulated (qemu-user through "
         "binfmt_misc, where the node has it): that proves an image works, never how fast that architecture is; "
         "the run records what its code ran as, detected, and is never pooled with native runs.",
         default_from="the system's", choices=ARCHES, field="image_arch", resolver="names", metavar="ARCH"),
    # layout: where the ranks run
    _opt("nodes", "Number of nodes.", type=int, default=1, aliases=("-N",), minimum=1, field="nodes",
         key=("nodes", "devices"), axis="nodes", resolver="layout"),
    _opt("ranks_per_node", "Ranks per node.", type=int, default_from="GPUs per node, or 1 on CPU", aliases=("-r",),
         minimum=1, field="ranks_per_node", key=("devices",), axis="ranks_per_node", resolver="layout"),
    _opt("threads", "CPU threads per rank.", type=int, default_from="the node's cores divided over its ranks",
         minimum=1, field="threads_per_rank", resolver="layout", harness_flag="--threads", harness_omit=(),
         env_var="OMP_NUM_THREADS"),
    # batch: how much work a step does, and how many steps
    _opt("batch_size", "Batch size per rank.", type=int, aliases=("-b",),
         default_from="the system's for this workload, else the workload's", minimum=1, field="batch_size",
         key=("batch_per_device", "global_batch"), axis="batch_per_device", resolver="batch",
         harness_flag="--batch-size", harness_kinds=_TRAINING, harness_omit=()),
    _opt("global_batch_size", "Total batch over all ranks (must divide evenly; instead of --batch-size).",
         type=int, minimum=1, key=("global_batch",), resolver="batch"),
    _opt("steps", "Timed steps (training steps, or iterations per message size).", type=int,
         default_from="the system's, else the workload's", minimum=1, field="steps", axis="steps",
         resolver="batch", harness_flag="--steps", harness_kinds=_EVERY, harness_omit=()),
    _opt("warmup_steps", "Untimed warm-up steps before timing.", type=int,
         default_from="the system's, else the workload's", minimum=0, field="warmup_steps", axis="warmup_steps",
         resolver="batch", harness_flag="--warmup-steps", harness_kinds=_EVERY, harness_omit=()),
    _opt("precision", "fp32 (IEEE: TF32 off), tf32 (GPU tensor cores), fp16 (autocast + gradient scaler, GPU), "
         "bf16 (autocast), or amp: the device's mixed precision (fp16 on GPU, bf16 on CPU; bf16 for LLMs).",
         default=DEFAULT_PRECISION,
         choices=PRECISIONS, field="precision", key=("precision",), axis="precision", resolver="framework",
         harness_flag="--precision", harness_kinds=_TRAINING, harness_omit=()),
    # data: what the ranks train on
    _opt("data", "Dataset directory: the ranks train on it (bound read-only at /data) instead of synthetic data; "
         "a storage workload reads its files. An experiment's `storage` axis sets it to the system's file system.",
         field="data", key=("data", "data_format"), axis="storage", resolver="data", metavar="DIR",
         harness_flag="--data-dir", harness_kinds=("training", "storage"), harness_value="data_mount"),
    _opt("stage_data", "Copy the --data directory to node-local storage (/tmp) once per node before the ranks "
         "start, and train from the copy; bytes and seconds are stored with the run.", type=bool, default=False,
         field="data", resolver="data"),
    _opt("data_workers", "Data-loader workers per rank (the BNL study's j; 0: the harness's default of 4).",
         type=int, default_from="the system's j", minimum=0, field="data_workers", axis="data_workers",
         resolver="data", harness_flag="--data-workers", harness_kinds=_TRAINING, harness_omit=(0,)),
    _opt("bind", "Extra bind SRC[:DST][:ro|rw] (repeatable; /data is --data's).", type=list, aliases=("-B",),
         field="binds", resolver="data", metavar="SPEC"),
    # environment: what the ranks see
    _opt("env", "Extra rank environment NAME=VALUE (repeatable).", type=list, aliases=("-e",), field="env",
         resolver="environment", metavar="NAME=VALUE"),
    _opt("secret_env", "Pass the variable NAME from this environment to the ranks as a secret: its value is never "
         "written to a file, the store or the output (NAME=VALUE works too, but puts the value on the command "
         "line). Names like *_TOKEN, *_PASSWORD, *_KEY are secret without it (repeatable).", type=list,
         field="secret_env", resolver="environment", metavar="NAME"),
    # backends: what starts and wraps the ranks
    _opt("scheduler", f"Scheduler: {', '.join(SCHEDULERS.names())}.", default_from="the system's",
         field="scheduler", resolver=_BACKEND),
    _opt("launcher", f"Process launcher: {', '.join(LAUNCHERS.names())}.",
         default_from="the system's (none for one local rank)", field="launcher", resolver=_BACKEND),
    _opt("runtime", f"Container runtime: {', '.join(RUNTIMES.names())}.",
         default_from="the system's (host for a host image)", field="runtime", resolver=_BACKEND),
    _opt("dist", "How the PyTorch harness distributes training: ddp (DistributedDataParallel), horovod "
         "(Horovod's DistributedOptimizer; needs an image with Horovod), fsdp (FSDP2 fully_shard) or dataparallel "
         "(one process per node over all its GPUs, torch.nn.DataParallel; GPUs only).",
         default_from="the system's; horovod under --launcher horovodrun",
         choices=("ddp", "horovod", "fsdp", "dataparallel"), field="dist", key=("framework", "devices"),
         axis="parallelism", resolver=_BACKEND, harness_flag="--dist", harness_omit=("ddp",)),
    _opt("dataparallel_gpus", "GPUs that one --dist dataparallel process spreads its batch over (the first N "
         "of its node's).", type=int, default_from="all of its node's GPUs", minimum=1, field="dataparallel_gpus",
         key=("devices",), axis="dataparallel_gpus", resolver="training", harness_flag="--dataparallel-gpus",
         metavar="N"),
    _opt("launcher_arg", "Extra launcher flag, passed as given (repeatable).", type=list, field="launcher_args",
         resolver=_BACKEND, metavar="FLAG"),
    # fabric: how nodes talk
    _opt("fabric", "Interconnect: ib, opa, roce or tcp.", default_from="the system's", field="fabric",
         key=("fabric",), axis="fabric", resolver="fabric"),
    # scheduler: what the batch job asks for
    _opt("partition", "Batch partition/queue; on a system that lists partitions, one of them (or the system's "
         "own), whose nodes the plan models.", default_from="the system's", field="scheduler_options",
         key=("partition",), axis="partition", resolver="scheduler"),
    _opt("account", "Batch account/project.", default_from="the system's", field="scheduler_options",
         resolver="scheduler"),
    _opt("time", "Job time limit: MINUTES, HH:MM:SS or D-HH:MM:SS, at most a year (also holds local runs; "
         "batch limits are whole minutes, rounded up).",
         default_from="the system's, 30 minutes", field="scheduler_options", resolver="scheduler",
         harness_flag="--timeout-s", harness_value="collective_timeout_s"),
    _opt("exclusive", "Whole nodes (batch jobs).", type=bool, aliases=("--exclusive/--shared",),
         default_from="the system's", field="scheduler_options", resolver="scheduler"),
    _opt("nodelist", "The job's nodes by host name, comma-separated, one per node (Slurm --nodelist, LSF -m, "
         "PBS host=): to run on chosen nodes, as `dlrun diagnose` does.", default_from="the scheduler's choice",
         field="scheduler_options", resolver="scheduler", metavar="HOST,HOST"),
    # telemetry: what the nodes did during the run
    _opt("telemetry", "Sample utilisation, clocks, power and energy on every node every PERIOD seconds "
         "(0.05 to 3600), or off.", default_from="1 second", field="telemetry_period", resolver="telemetry",
         metavar="off|PERIOD"),
    # framework: how the benchmark code runs
    _opt("allocator", "Memory allocator of the PyTorch harness: tcmalloc, jemalloc, glibc-tuned or system; "
         + _TUNED.format("tcmalloc, else jemalloc, else glibc-tuned"), default="auto",
         choices=("auto", "tcmalloc", "jemalloc", "glibc-tuned", "system"), field="allocator",
         resolver="framework", harness_flag="--allocator"),
    # knobs: how fast the PyTorch harness's step runs, never what it computes (dlrun.tune measures them)
    _opt("fused_optimizer", "The optimizer's fused step (one pass per tensor; same arithmetic) on, or PyTorch's "
         "default step off; " + _TUNED.format("on CUDA fused where this PyTorch has it; on a CPU PyTorch's step unless the fused "
                                   "one was measured to win on its processor kind"), default="auto",
         choices=_KNOB, field="fused_optimizer", resolver="framework", harness_flag="--fused-optimizer"),
    _opt("fused_bn_relu", "ResNets' batch norm + ReLU (+ residual) in fp32 channels-last CPU training through one "
         "fused kernel, compiled once per CPU with the machine's C compiler (fewer passes over memory; same "
         "arithmetic up to rounding) on, or PyTorch's ops off; " + _TUNED.format("on where it builds and was measured to win on the processor kind"),
         default="auto", choices=_KNOB, field="fused_bn_relu", resolver="framework", harness_flag="--fused-bn-relu"),
    _opt("channels_last", "Image models in channels-last (NHWC) memory format on, or NCHW off; "
         + _TUNED.format("on for CUDA, and on oneDNN CPUs where NHWC was measured to win on "
                                                         "the processor kind"), default="auto", choices=_KNOB, field="channels_last",
         resolver="framework", harness_flag="--channels-last"),
    _opt("compile", "torch.compile (inductor) the model, in the untimed warm-up steps; " + _TUNED.format("off"),
         default="auto", choices=_KNOB, field="compile", resolver="framework",
         harness_flag="--compile"),
    _opt("pin_threads", "Bind each rank's threads one per CPU of its share (on), or let the OS place them (off); "
         + _TUNED.format("off"), default="auto", choices=_KNOB, field="pin_threads",
         resolver="framework", harness_flag="--pin-threads"),
    _opt("cudnn_benchmark", "GPUs: let cuDNN time its algorithms for each shape (on), or take its heuristics "
         "(off); " + _TUNED.format("on"), default="auto", choices=_KNOB, field="cudnn_benchmark",
         resolver="framework", harness_flag="--cudnn-benchmark"),
    _opt("tune", "auto: before the first run of a configuration on a machine whose fingerprint has no tuning "
         "decision, measure the knobs left at auto on short runs (within $DLRUN_TUNE_BUDGET_S, default 20 s; on "
         "a CPU at batch 16 at most, each knob moved alone; `dlrun tune` measures all of them at the run's batch) "
         "and keep the fastest; off: the defaults.", default_from="$DLRUN_TUNE, else auto", choices=("auto", "off"), field="tune",
         resolver="framework"),
    # training: what a training step holds and what a run saves
    _opt("seq_length", "LLM workloads: tokens per sequence.", type=int, minimum=1,
         default_from="the model's (8192 for llama3_1b and llama3_8b, 256 for llama3_tiny)", field="seq_length",
         key=("model",), resolver="training", harness_flag="--seq-length"),
    _opt("grad_accum", "Micro-batches per optimizer step (gradient accumulation): the global batch is batch per "
         "rank x ranks x this.", type=int, default=1, minimum=1, field="grad_accum", key=("global_batch",),
         resolver="training", harness_flag="--global-batch-size", harness_kinds=_TRAINING,
         harness_value="accumulated_global_batch"),
    _opt("activation_checkpointing", "LLM workloads: recompute each decoder layer in the backward instead of "
         "keeping its activations.", type=bool, default=False, field="activation_checkpointing", key=("model",),
         resolver="training", harness_flag="--activation-checkpointing"),
    _opt("checkpoint_every", "Save model and optimizer state after every N-th timed step; seconds and GB/s are "
         "stored with the run.", type=int, minimum=1, default_from="none saved", field="checkpoint_every",
         resolver="training",
         harness_flag="--checkpoint-every", metavar="N"),
    _opt("checkpoint_dir", "Where --checkpoint-every writes (bound read-write).",
         default_from="checkpoints/ in the run directory", field="checkpoint_dir", resolver="training",
         metavar="PATH", harness_flag="--checkpoint-dir", harness_kinds=_TRAINING, harness_value="checkpoint_target"),
    _opt("variable_update", "tf_cnn_benchmarks: how gradients meet: parameter_server, distributed_replicated, "
         "collective_all_reduce, horovod, replicated, independent.",
         default_from="horovod where the image has it, else parameter servers on several nodes",
         field="variable_update", key=("framework",), axis="variable_update", resolver="framework"),
    _opt("all_reduce_spec", "tf_cnn_benchmarks --all_reduce_spec, e.g. xring, nccl/xring, pscpu:32k:xring, "
         "collective#2.", field="all_reduce_spec", key=("framework",), axis="all_reduce_spec",
         resolver="framework"),
    _opt("ps", "tf_cnn_benchmarks parameter servers, spread over the nodes.", type=int,
         default_from="1 in parameter-server mode", minimum=0, field="parameter_servers", key=("framework",),
         axis="parameter_servers", resolver="framework"),
    _opt("data_format", "tf_cnn_benchmarks tensor layout: NCHW or NHWC.", default_from="NCHW on GPU, NHWC on CPU",
         field="data_format", key=("framework",), resolver="framework"),
    _opt("benchmark_arg", "Extra tf_cnn_benchmarks flag --FLAG[=VALUE], passed quoted (repeatable).", type=list,
         field="benchmark_args", key=("framework",), resolver="framework", metavar="FLAG"),
)

BY_NAME: dict[str, RunOption] = {option.name: option for option in RUN_OPTIONS}
#: The options that are speed knobs of the PyTorch harness (the contract's KNOBS): each run records its value
#: and why (asked for, tuned, default); dlrun.tune measures those left at their default.
__all__ = ["KNOBS", "PRECISIONS", "RUN_OPTIONS", "RunOption", "Request", "option", "request"]


def option(name: str) -> RunOption:
    return BY_NAME[name]


def _checked(opt: RunOption, value: Any) -> Any:
    """The generic checks of one given value (type, minimum, choices): one line naming it and what is valid."""
    if opt.type is int and value is not None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"{opt.flag} must be an integer, got {value!r}")
        if opt.minimum is not None and value < opt.minimum:
            what = "a positive integer" if opt.minimum == 1 else f">= {opt.minimum}"
            raise UsageError(f"{opt.flag} must be {what}, got {value}")
    if opt.choices and value is not None and value not in opt.choices:
        raise unknown_name(opt.flag, str(value), opt.choices)
    if opt.type is list and value is not None:
        return tuple(str(item) for item in value)
    return value


@dataclass(frozen=True)
class Request:
    """What the user (or an experiment point) asked for: every declared option, given or at its default."""

    values: Mapping[str, Any]
    given: frozenset[str]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def is_given(self, name: str) -> bool:
        return name in self.given


def request(options: Mapping[str, Any]) -> Request:
    """Check `options` (names from RUN_OPTIONS; None means not given) and fill in the declared defaults."""
    unknown = sorted(set(options) - set(BY_NAME))
    if unknown:
        raise TypeError(f"no run option named {', '.join(unknown)}; declared: {', '.join(BY_NAME)}")
    values: dict[str, Any] = {}
    given = set()
    for opt in RUN_OPTIONS:
        value = options.get(opt.name)
        if value is None or (opt.type is list and not value):
            values[opt.name] = () if opt.type is list else opt.default
            continue
        values[opt.name] = _checked(opt, value)
        if value != opt.default:  # the CLI passes every default; an explicit default is no request
            given.add(opt.name)
    return Request(values=values, given=frozenset(given))


def options_for(resolver: str) -> tuple[RunOption, ...]:
    return tuple(option for option in RUN_OPTIONS if option.resolver == resolver)


def key_fields() -> tuple[str, ...]:
    """The comparability-key fields some option decides, in declaration order."""
    seen: dict[str, None] = {}
    for opt in RUN_OPTIONS:
        for name in opt.key:
            seen.setdefault(name, None)
    return tuple(seen)


def harness_args(value_of: Callable[[RunOption], Any], kind: str) -> list[str]:
    """`FLAG VALUE` (a bool: `FLAG`) for every option that reaches harness commands of `kind` (training,
    collective, storage), in declaration order, unless its plan value (`value_of`) is one the harness takes as
    its own default."""
    argv: list[str] = []
    for opt in RUN_OPTIONS:
        if opt.harness_flag is None or kind not in opt.harness_kinds:
            continue
        value = value_of(opt)
        if opt.omitted(value):
            continue
        argv += [opt.harness_flag] if opt.type is bool else [opt.harness_flag,
                                                              value if isinstance(value, str) else str(value)]
    return argv


def rank_env(value_of: Callable[[RunOption], Any]) -> dict[str, str]:
    """The ranks' variables the options set (`env_var`), from their plan values."""
    return {opt.env_var: str(value_of(opt)) for opt in RUN_OPTIONS if opt.env_var and value_of(opt) is not None}
