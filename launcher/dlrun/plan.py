"""Resolve names and overrides into one immutable Plan: everything a run needs, as data."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dlrun.catalog import Catalog
from dlrun.catalog.models import TF2_HARNESS_MODELS, ImageSpec, SchedulerOptions, SystemSpec, WorkloadSpec
from dlrun.catalog.stack import NcclTests
from dlrun.errors import UsageError, unknown_name
from dlrun.fabrics import FabricSettings, check_fabric_name, fabric_settings
from dlrun.registry import LAUNCHERS, RUNTIMES, SCHEDULERS
from dlrun.secrets import redact_env, secret_names
from dlrun.staging import staged_path
from dlrun.tfoptions import resolve_tf_options

#: Fills in what this site has of an image for one architecture (digest, root filesystem, SIF, squashfs).
LocalImage = Callable[[ImageSpec, str], ImageSpec]

Precision = Literal["fp32", "amp"]
DATA_MOUNT = "/data"


class Bind(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    target: str
    read_only: bool = True


def parse_bind(spec: str) -> Bind:
    """`SRC[:DST][:ro|rw]` -> Bind (read-only unless `:rw`)."""
    parts = spec.split(":")
    mode = "ro"
    if len(parts) > 1 and parts[-1] in ("ro", "rw"):
        mode = parts.pop()
    if len(parts) == 1:
        parts.append(parts[0])
    if len(parts) != 2 or not parts[0] or not parts[1].startswith("/"):
        raise UsageError(f"bad --bind {spec!r}; valid: SRC[:DST][:ro|rw] with an absolute DST")
    return Bind(source=parts[0], target=parts[1], read_only=mode == "ro")


def parse_env(spec: str) -> tuple[str, str]:
    name, sep, value = spec.partition("=")
    if not sep or not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
        shown = f"{name}=..." if sep else spec  # the value may be a secret: never echo it
        raise UsageError(f"bad --env {shown!r}; valid: NAME=VALUE with NAME made of letters, digits and _")
    return name, value


Allocator = Literal["auto", "tcmalloc", "jemalloc", "glibc-tuned", "system"]
ALLOCATORS = get_args(Allocator)
Dist = Literal["ddp", "horovod"]
DISTS = get_args(Dist)


class Plan(BaseModel):
    """The resolved run. Frozen: renderers and executors read it, nobody changes it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workload: WorkloadSpec
    image: ImageSpec
    system: SystemSpec
    nodes: int = Field(gt=0)
    ranks_per_node: int = Field(gt=0)
    batch_size: int = Field(gt=0, description="per rank")
    steps: int = Field(gt=0)
    warmup_steps: int = Field(ge=0)
    precision: Precision = "fp32"
    device: Literal["cpu", "cuda"] = "cpu"
    threads_per_rank: int = Field(gt=0)
    scheduler: str
    launcher: str
    runtime: str
    fabric: str
    master_port: int = 29500
    env: dict[str, str] = {}
    binds: list[Bind] = []
    devices: list[str] = []  # host device paths to pass into containers (fabric devices, /dev/infiniband/...)
    data_workers: int = Field(default=0, ge=0)  # data-loader workers per rank (Ren et al.'s j)
    stage_data: str | None = None  # --stage-data: this dataset is copied to each node first (dlrun.staging)
    allocator: Allocator = "auto"  # the PyTorch harness's malloc (see harness_pytorch.py)
    # The PyTorch harness's distribution layer (--dist); None where the image runs tf_cnn_benchmarks.
    dist: Dist | None = "ddp"
    scheduler_options: SchedulerOptions = SchedulerOptions()
    launcher_args: list[str] = []  # extra flags for the launcher (mpirun, srun, ...), passed as given
    secret_env: list[str] = []  # names in `env` the user marked secret (--secret-env); see dlrun.secrets
    # tf_cnn_benchmarks only (dlrun.tfoptions): None / 0 / [] for the PyTorch harness.
    variable_update: str | None = None
    all_reduce_spec: str | None = None
    parameter_servers: int = Field(default=0, ge=0)
    data_format: Literal["NCHW", "NHWC"] | None = None
    benchmark_args: list[str] = []

    @property
    def secret_names(self) -> set[str]:
        """Names in `env` whose values reach the ranks from the job's environment and are never written."""
        return secret_names(self.env, self.secret_env)

    @property
    def data_bind(self) -> Bind | None:  # --data: the dataset (with --stage-data, its node-local copy)
        return next((bind for bind in self.binds if bind.target == DATA_MOUNT), None)

    @property
    def job_name(self) -> str:
        return f"dlrun-{self.workload.name}"

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def global_batch_size(self) -> int:
        return self.world_size * self.batch_size

    def summary(self) -> dict:
        """The plan as JSON-able data, with the derived counts spelled out."""
        data = self.model_dump(mode="json")
        data["env"] = redact_env(self.env, self.secret_env, [self.env[name] for name in self.secret_names])
        data["world_size"] = self.world_size
        data["global_batch_size"] = self.global_batch_size
        return data


def fabric_for(plan: Plan) -> FabricSettings:
    """The fabric settings of a plan: its system's configuration of that fabric, rendered."""
    return fabric_settings(plan.fabric, plan.system.fabric_config.get(plan.fabric), device=plan.device)


def _first(*values: int | None) -> int:
    return next(value for value in values if value is not None)


def resolve_plan(
    catalog: Catalog,
    workload: str,
    *,
    image: str | None = None,
    system: str = "localhost",
    nodes: int | None = None,
    ranks_per_node: int | None = None,
    batch_size: int | None = None,
    global_batch_size: int | None = None,
    steps: int | None = None,
    warmup_steps: int | None = None,
    precision: str = "fp32",
    launcher: str | None = None,
    runtime: str | None = None,
    scheduler: str | None = None,
    fabric: str | None = None,
    threads_per_rank: int | None = None,
    data_dir: str | None = None,
    binds: list[str] | None = None,
    env: list[str] | None = None,
    data_workers: int | None = None,
    stage_data: bool = False,
    allocator: str = "auto",
    dist: str | None = None,
    partition: str | None = None,
    account: str | None = None,
    time_limit: str | None = None,
    exclusive: bool | None = None,
    launcher_args: list[str] | None = None,
    secret_env: list[str] | None = None,
    variable_update: str | None = None,
    all_reduce_spec: str | None = None,
    ps: int | None = None,
    data_format: str | None = None,
    benchmark_args: list[str] | None = None,
    local_image: LocalImage | None = None,
) -> Plan:
    """The plan for `workload` with these overrides. `local_image` adds this site's copy of a container image
    (its recorded digest and local files); without it the image is used as the catalog describes it."""
    for option, value in (("--nodes", nodes), ("--ranks-per-node", ranks_per_node),
                          ("--batch-size", batch_size), ("--global-batch-size", global_batch_size),
                          ("--steps", steps), ("--threads", threads_per_rank)):
        if value is not None and value <= 0:
            raise UsageError(f"{option} must be a positive integer, got {value}")
    if warmup_steps is not None and warmup_steps < 0:
        raise UsageError(f"--warmup-steps must be >= 0, got {warmup_steps}")
    if precision not in ("fp32", "amp"):
        raise UsageError(f"unknown precision {precision!r}; valid: fp32, amp")
    if allocator not in ALLOCATORS:
        raise unknown_name("allocator", allocator, ALLOCATORS)
    if dist is not None and dist not in DISTS:
        raise unknown_name("--dist", dist, DISTS)

    work: WorkloadSpec = catalog.workload(workload)
    sys_: SystemSpec = catalog.system(system)
    img: ImageSpec = catalog.image(image or sys_.default_image)

    nodes = nodes or 1
    if nodes > sys_.nodes:
        raise UsageError(f"--nodes {nodes} exceeds system {sys_.name!r}, which has {sys_.nodes} node(s); "
                         f"valid: 1..{sys_.nodes}, or --system NAME for a larger system (see dlrun systems list)")
    if sys_.arch not in img.arch:
        raise UsageError(f"image {img.name!r} is built for {', '.join(img.arch)}, "
                         f"but system {sys_.name!r} is {sys_.arch}")
    tf_cnn = img.framework == "tensorflow" and img.harness_framework is None
    if tf_cnn and not work.tf_cnn_model and work.kind != "nccl-tests":
        valid = sorted(w.name for w in catalog.workloads.values() if w.tf_cnn_model)
        raise UsageError(f"workload {work.name!r} has no tf_cnn_benchmarks model, which image {img.name!r} "
                         f"(TensorFlow) runs; valid workloads for it: {', '.join(valid)}")
    if img.harness_framework == "tensorflow" and not (work.trains and work.model in TF2_HARNESS_MODELS):
        valid = sorted(w.name for w in catalog.workloads.values() if w.trains and w.model in TF2_HARNESS_MODELS)
        raise UsageError(f"workload {work.name!r} has no model in dlrun's TensorFlow 2 harness, which image "
                         f"{img.name!r} runs; valid workloads for it: {', '.join(valid)}")
    if img.framework == "tensorflow" and allocator != "auto":
        raise UsageError(f"--allocator {allocator} applies to dlrun's PyTorch harness, but image {img.name!r} runs "
                         "TensorFlow; valid for it: auto")
    if img.framework not in ("pytorch", "tensorflow"):
        raise UsageError(f"image {img.name!r} has framework {img.framework!r}, which no dlrun workload command "
                         "runs; valid: pytorch, tensorflow")
    if img.kind == "container" and local_image is not None:
        img = local_image(img, sys_.arch)

    device = "cuda" if sys_.gpus_per_node else "cpu"
    if ranks_per_node is None:
        ranks_per_node = sys_.gpus_per_node or 1
    per_node_limit = sys_.gpus_per_node or sys_.cpu.cores * sys_.cpu.threads_per_core
    unit = "GPU(s)" if sys_.gpus_per_node else "CPU(s)"
    if ranks_per_node > per_node_limit:
        raise UsageError(f"--ranks-per-node {ranks_per_node} exceeds the {per_node_limit} {unit} per node of "
                         f"system {sys_.name!r}; valid: 1..{per_node_limit}")
    world = nodes * ranks_per_node
    if not work.trains:
        if world < 2:
            raise UsageError(f"workload {work.name!r} measures {work.measures} between ranks and needs at least 2, got "
                             f"{world} ({nodes} node(s) x {ranks_per_node}); valid: --ranks-per-node 2 or more, "
                             "or --nodes 2 or more")
        if batch_size is not None or global_batch_size is not None or precision != "fp32":
            raise UsageError(f"workload {work.name!r} trains no model; --batch-size, --global-batch-size and "
                             "--precision do not apply (valid: --steps and --warmup-steps, per message size)")

    if batch_size is not None and global_batch_size is not None:
        raise UsageError("give either --batch-size (per rank) or --global-batch-size, not both")
    if global_batch_size is not None:
        if global_batch_size % world:
            lower = global_batch_size - global_batch_size % world
            choices = f"{lower} or {lower + world}" if lower else f"{world}"
            raise UsageError(f"--global-batch-size {global_batch_size} does not divide over {world} ranks "
                             f"({nodes} node(s) x {ranks_per_node}); valid: a multiple of {world}, e.g. {choices}")
        batch_size = global_batch_size // world
    if batch_size is None:
        batch_size = sys_.batch_sizes.get(work.name) or sys_.default_batch_size or work.default_batch_size

    if threads_per_rank is None:
        cores = sys_.cpu.cores
        threads_per_rank = max(cores // ranks_per_node, 1)

    # A system's default steps are training steps; an allreduce workload's are iterations per message size.
    sys_steps, sys_warmup = ((None, None) if not work.trains
                             else (sys_.default_steps, sys_.default_warmup_steps))

    bind_list = [parse_bind(spec) for spec in binds or []]
    if data_dir is not None:
        if not Path(data_dir).is_dir():
            raise UsageError(f"--data {data_dir!r} is not a directory; valid: an existing dataset directory")
        source = str(Path(data_dir).resolve())
        bind_list.append(Bind(source=staged_path(source) if stage_data else source, target=DATA_MOUNT))
    elif stage_data:
        raise UsageError("--stage-data copies the --data directory to each node; valid: --stage-data with --data DIR")
    env_map = dict(parse_env(spec) for spec in env or [])
    unset = [name for name in secret_env or [] if name not in env_map]
    if unset:
        raise UsageError(f"--secret-env {unset[0]} has no value; valid: a variable set in dlrun's environment, "
                         f"or --secret-env {unset[0]}=VALUE")
    if data_workers is not None and data_workers < 0:
        raise UsageError(f"--data-workers must be >= 0, got {data_workers}")

    scheduler = scheduler or sys_.scheduler
    launcher = launcher or (sys_.launcher if world > 1 or scheduler != "local" else "none")
    runtime = runtime or ("host" if img.kind == "host" else sys_.runtime)
    _check_backend_names(scheduler=scheduler, launcher=launcher, runtime=runtime)
    if work.kind == "nccl-tests":
        _check_nccl_tests(catalog, work, img, sys_, launcher)
    dist = _resolve_dist(catalog, dist, work, img, sys_, launcher)
    fabric = _resolve_fabric(sys_, fabric)
    options = _scheduler_options(sys_.scheduler_options, partition=partition, account=account,
                                 time_limit=time_limit, exclusive=exclusive)
    devices = fabric_settings(fabric, sys_.fabric_config.get(fabric), device=device).devices
    tf_options = resolve_tf_options(img, nodes=nodes, world=world, device=device, variable_update=variable_update,
                                    all_reduce_spec=all_reduce_spec, ps=ps, data_format=data_format,
                                    benchmark_args=benchmark_args)

    return Plan(
        workload=work,
        image=img,
        system=sys_,
        nodes=nodes,
        ranks_per_node=ranks_per_node,
        batch_size=batch_size,
        steps=_first(steps, sys_steps, work.default_steps),
        warmup_steps=_first(warmup_steps, sys_warmup, work.default_warmup_steps),
        precision=precision,  # type: ignore[arg-type]
        device=device,
        threads_per_rank=threads_per_rank,
        scheduler=scheduler,
        launcher=launcher,
        runtime=runtime,
        fabric=fabric,
        binds=bind_list,
        env=env_map,
        devices=devices,
        data_workers=sys_.data_loader_workers if data_workers is None else data_workers,
        stage_data=str(Path(data_dir).resolve()) if stage_data and data_dir is not None else None,
        allocator=allocator,  # type: ignore[arg-type]
        dist=dist,  # type: ignore[arg-type]
        scheduler_options=options,
        launcher_args=list(launcher_args or []),
        secret_env=sorted(set(secret_env or [])),
        **tf_options,
    )


def _resolve_dist(catalog: Catalog, dist: str | None, work: WorkloadSpec, img: ImageSpec, system: SystemSpec,
                  launcher: str) -> str | None:
    """--dist, else Horovod under horovodrun, else the system's default (training only); an image without
    Horovod cannot run it. None for TensorFlow images: tf_cnn_benchmarks distributes by itself."""
    if img.framework != "pytorch":
        if dist is not None:
            raise UsageError(f"--dist {dist} applies to dlrun's PyTorch harness, but image {img.name!r} runs "
                             "tf_cnn_benchmarks (TensorFlow), which distributes by itself; valid: no --dist")
        return None
    if launcher == "horovodrun":
        if dist == "ddp":
            raise UsageError("--launcher horovodrun starts Horovod ranks, but --dist ddp asks for "
                             "DistributedDataParallel; valid: --dist horovod, or --launcher mpirun")
        dist = "horovod"
    if not work.trains:
        if dist == "horovod":
            raise UsageError(f"--dist horovod (or --launcher horovodrun) applies to training, but workload "
                             f"{work.name!r} measures all-reduce over a torch.distributed process group; "
                             "valid: --dist ddp with --launcher mpirun")
        return "ddp"
    chosen = dist or system.dist
    if chosen == "horovod" and img.horovod_release() is None:
        have = sorted(name for name, other in catalog.images.items()
                      if other.framework == "pytorch" and other.horovod_release() and system.arch in other.arch)
        why = ("--dist horovod" if dist else f"system {system.name!r} trains with Horovod by default (dist: horovod)")
        images = " or ".join(f"--image {name}" for name in have) or "an image with Horovod"
        raise UsageError(f"{why}, but image {img.name!r} has no Horovod; valid: {images}, or --dist ddp")
    return chosen


def _check_backend_names(**names: str) -> None:
    registries = {"scheduler": SCHEDULERS, "launcher": LAUNCHERS, "runtime": RUNTIMES}
    for kind, name in names.items():
        registries[kind].check(name)


def _check_nccl_tests(catalog: Catalog, work: WorkloadSpec, img: ImageSpec, system: SystemSpec, launcher: str) -> None:
    """nccl-tests runs from the image's own MPI=1 build, one process per GPU, started by an MPI-aware launcher
    (started any other way, every process would be a one-rank test of its own)."""
    if not isinstance(getattr(img, "nccl_tests", None), NcclTests):
        having = sorted(name for name, spec in catalog.images.items()
                        if isinstance(getattr(spec, "nccl_tests", None), NcclTests))
        raise UsageError(f"image {img.name!r} has no nccl-tests, which workload {work.name!r} runs; valid images: "
                         f"{', '.join(having) or 'none in this catalog'} (--image NAME)")
    if not system.gpus_per_node:
        raise UsageError(f"workload {work.name!r} runs nccl-tests, which needs GPUs, but system {system.name!r} has "
                         "none; valid: a GPU system (--system NAME, see dlrun systems list)")
    if not LAUNCHERS.get_class(launcher).starts_mpi_programs:  # nccl-tests is built with MPI=1
        able = [name for name, each in LAUNCHERS.available().items() if each.starts_mpi_programs]
        raise UsageError(f"workload {work.name!r} runs nccl-tests (an MPI program) and cannot be started by "
                         f"launcher {launcher}; valid: {', '.join(able)}")


def _resolve_fabric(system: SystemSpec, fabric: str | None) -> str:
    if fabric is None:
        return system.default_fabric if system.default_fabric != "auto" else system.fabrics[0]
    check_fabric_name(fabric)
    if fabric not in system.fabrics:
        raise UsageError(f"--fabric {fabric} is not a fabric of system {system.name!r}; "
                         f"valid: {', '.join(system.fabrics)}")
    return fabric


def _scheduler_options(base: SchedulerOptions, *, partition: str | None, account: str | None,
                       time_limit: str | None, exclusive: bool | None) -> SchedulerOptions:
    changes = {key: value for key, value in (("partition", partition), ("account", account),
                                             ("time", time_limit), ("exclusive", exclusive)) if value is not None}
    if not changes:
        return base
    try:
        return SchedulerOptions(**{**base.model_dump(), **changes})
    except ValidationError as exc:
        err = exc.errors()[0]
        option = {"time": "--time"}.get(str(err["loc"][0]), f"--{err['loc'][0]}")
        value = changes.get(str(err["loc"][0]))
        raise UsageError(f"bad {option} {value!r}; valid: "
                         + ("MINUTES, HH:MM:SS or D-HH:MM:SS" if option == "--time"
                            else "letters, digits and _ . , : + = @ % / -, not starting with -")) from None
