"""The resolved run: one immutable `Plan` with everything a run needs, as data."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dlrun.catalog.models import ImageSpec, SchedulerOptions, SystemSpec, WorkloadSpec
from dlrun.fabrics import FabricSettings, fabric_settings
from dlrun.harness.harness_contract import DEFAULT_PRECISION, PRECISIONS
from dlrun.job import RUN_DIR_VAR
from dlrun.nodemodel import node_model
from dlrun.nodemodel.gpudirect import PSM2_GPU_VARS, GpuDirect, nccl_gpudirect, psm2_gpu_env
from dlrun.secrets import redact_env, secret_names
from dlrun.shell import Expand

#: Fills in what this site has of an image for one architecture (digest, root filesystem, SIF, squashfs).
LocalImage = Callable[[ImageSpec, str], ImageSpec]

Precision = Literal[PRECISIONS]  # type: ignore[valid-type]
#: Where the ranks find the dataset of `--data` inside the container (the host runtime maps it back).
DATA_MOUNT = "/data"
#: PyTorch's own default collective timeout (gloo; NCCL before 2.2), which a run's time limit shortens.
DEFAULT_COLLECTIVE_TIMEOUT_S = 1800

Allocator = Literal["auto", "tcmalloc", "jemalloc", "glibc-tuned", "system"]
#: A speed knob of the PyTorch harness: auto is the tuner's decision for the machine, else the default.
Knob = Literal["auto", "on", "off"]
Dist = Literal["ddp", "horovod", "fsdp", "dataparallel"]


class Bind(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    target: str
    read_only: bool = True


class DataSpec(BaseModel):
    """`--data DIR` (and `--stage-data`): the dataset the ranks train on, mounted read-only at /data."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: The dataset's absolute path on the submitting host (and, on a shared file system, on every node).
    path: str
    #: What the directory holds, as far as its top level tells: tfrecord shards, a jpeg tree, or unknown.
    format: Literal["tfrecord", "jpeg", "unknown"] = "unknown"
    #: `--stage-data`: the node-local copy each node trains from (dlrun.staging), else None.
    staged_copy: str | None = None
    mount: str = DATA_MOUNT

    @property
    def bind(self) -> Bind:
        """The read-only bind of what the ranks read: the node-local copy when staged, else the dataset."""
        return Bind(source=self.staged_copy or self.path, target=self.mount)


class Plan(BaseModel):
    """The resolved run. Frozen: renderers and executors read it, nobody changes it. Which option sets which
    field is declared in dlrun.runoptions; the fields no option sets are listed in DERIVED_FIELDS."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workload: WorkloadSpec
    image: ImageSpec
    system: SystemSpec
    image_arch: str  # the architecture of the image the ranks run (the system's, or emulated: --arch)
    nodes: int = Field(gt=0)
    ranks_per_node: int = Field(gt=0)
    batch_size: int = Field(gt=0, description="per rank")
    steps: int = Field(gt=0)
    warmup_steps: int = Field(ge=0)
    precision: Precision = DEFAULT_PRECISION
    device: Literal["cpu", "cuda"] = "cpu"
    threads_per_rank: int = Field(gt=0)
    scheduler: str
    launcher: str
    runtime: str
    fabric: str
    master_port: int = 29500
    env: dict[str, str] = {}
    binds: list[Bind] = []  # --bind: the user's own binds (never /data, which is `data`'s)
    data: DataSpec | None = None  # --data: the dataset the ranks train on; None: synthetic data
    devices: list[str] = []  # host device paths to pass into containers (fabric devices, /dev/infiniband/...)
    data_workers: int = Field(default=0, ge=0)  # data-loader workers per rank (Ren et al.'s j)
    allocator: Allocator = "auto"  # the PyTorch harness's malloc (see harness_pytorch.py)
    # Speed knobs of the PyTorch harness (dlrun.tune); never part of the comparability key
    fused_optimizer: Knob = "auto"
    fused_bn_relu: Knob = "auto"
    channels_last: Knob = "auto"
    compile: Knob = "auto"
    pin_threads: Knob = "auto"
    cudnn_benchmark: Knob = "auto"
    tune: Literal["auto", "off"] = "auto"  # measure the knobs left at auto where no decision is stored
    knob_sources: dict[str, str] = {}  # knob -> asked for | tuned | default (PyTorch harness training only)
    tuning: dict[str, Any] = {}  # the tuner's decision this run used (machine, configuration, when), if any
    # The PyTorch harness's distribution layer (--dist); None where the image runs tf_cnn_benchmarks.
    dist: Dist | None = "ddp"
    dataparallel_gpus: int | None = Field(default=None, gt=0)  # --dist dataparallel: GPUs per process; None: all
    seq_length: int | None = Field(default=None, gt=0)  # LLMs: tokens per sequence; None: the model's
    grad_accum: int = Field(default=1, gt=0)  # micro-batches per optimizer step
    activation_checkpointing: bool = False
    checkpoint_every: int | None = Field(default=None, gt=0)
    checkpoint_dir: str | None = None  # None: checkpoints/ in the run directory
    # the store's newest `dlrun measure matmul` rate of the system at the run's precision (LLM MFU's ceiling)
    matmul_gflops: float | None = Field(default=None, gt=0)
    telemetry_period: float | None = Field(default=1.0, gt=0)  # seconds between telemetry samples; None: off
    scheduler_options: SchedulerOptions = SchedulerOptions()
    runs_as_root: bool = False  # the job's processes run as root (dlrun.plan.jobuser): root-only settings allowed
    launcher_args: list[str] = []  # extra flags for the launcher (mpirun, srun, ...), passed as given
    secret_env: list[str] = []  # names in `env` the user marked secret (--secret-env); see dlrun.secrets
    # tf_cnn_benchmarks only (dlrun.tfcnn.knobs): None / 0 / [] for the PyTorch harness.
    variable_update: str | None = None
    all_reduce_spec: str | None = None
    parameter_servers: int = Field(default=0, ge=0)
    data_format: Literal["NCHW", "NHWC"] | None = None
    benchmark_args: list[str] = []
    # options that only reach the harness (a harness flag and no field of their own: dlrun.runoptions)
    harness_options: dict[str, Any] = {}

    @property
    def secret_names(self) -> set[str]:
        """Names in `env` whose values reach the ranks from the job's environment and are never written."""
        return secret_names(self.env, self.secret_env)

    @property
    def mounts(self) -> list[Bind]:
        """Everything bound into the container: the user's binds, then the dataset at /data."""
        return [*self.binds, *([self.data.bind] if self.data is not None else [])]

    @property
    def job_name(self) -> str:
        return f"dlrun-{self.workload.name}"

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def device_count(self) -> int:
        """Devices that do the work: a GPU per rank, or under --dist dataparallel the GPUs each node's process
        drives (--dataparallel-gpus, else all of the node's)."""
        if self.dist != "dataparallel":
            return self.world_size
        return self.nodes * (self.dataparallel_gpus or self.system.gpus_per_node or 1)

    @property
    def global_batch_size(self) -> int:
        return self.device_count * self.batch_size * self.grad_accum

    # What the harness is handed of some options (their `harness_value` in dlrun.runoptions).
    @property
    def data_mount(self) -> str | None:
        """Where the ranks read --data's dataset, or None for synthetic data."""
        return self.data.mount if self.data is not None else None

    @property
    def accumulated_global_batch(self) -> int | None:
        """With gradient accumulation, the global batch over every device and micro-batch; else None (the
        harness's own batch x devices)."""
        return self.global_batch_size if self.grad_accum > 1 else None

    @property
    def checkpoint_target(self) -> str | None:
        """Where --checkpoint-every saves: --checkpoint-dir, else checkpoints/ of the run directory."""
        if self.checkpoint_every is None:
            return None
        return self.checkpoint_dir or Expand(f"${{{RUN_DIR_VAR}}}/checkpoints")

    @property
    def collective_timeout_s(self) -> int | None:
        """The harness's collective timeout: the run's time limit, so that one stopped rank ends the job with
        the surviving ranks' timeout error; never longer than PyTorch's own default."""
        limit = self.scheduler_options.time_seconds()
        return None if limit is None else min(limit, DEFAULT_COLLECTIVE_TIMEOUT_S)

    def summary(self) -> dict:
        """The plan as JSON-able data, with the derived counts spelled out."""
        data = self.model_dump(mode="json")
        data["env"] = redact_env(self.env, self.secret_env, [self.env[name] for name in self.secret_names])
        data["world_size"] = self.world_size
        data["global_batch_size"] = self.global_batch_size
        return data


#: Plan fields no run option sets, and where they come from (tests/test_run_options.py checks the list).
DERIVED_FIELDS = {
    "workload": "the workload argument",
    "device": "cuda where the system has GPUs, else cpu",
    "master_port": "the rendezvous port (the local executor picks a free one at run time)",
    "devices": "the fabric's host devices",
    "knob_sources": "which knobs the user asked for (the options), the tuner decided (dlrun.tune) or the "
                    "defaults decide",
    "tuning": "the tuner's stored decision a run applied (dlrun.tune)",
    "matmul_gflops": "the store's newest `dlrun measure matmul` of the system in the element type the run computes in "
                     "(dlrun.plan.finish)",
    "harness_options": "the options that only reach the harness (dlrun.runoptions: a harness flag, no field)",
    "runs_as_root": "whether the job's processes run as root: the user who starts dlrun, a pod's image user "
                    "(dlrun.plan.jobuser)",
}


def fabric_for(plan: Plan) -> FabricSettings:
    """The fabric settings of a plan: its system's configuration of that fabric, rendered, with the GPUDirect
    settings its node model and image allow (gpudirect_for)."""
    settings = fabric_settings(plan.fabric, plan.system.fabric_config.get(plan.fabric), device=plan.device)
    env = {name: value for name, value in settings.env.items() if name not in PSM2_GPU_VARS}
    return dataclasses.replace(settings, env={**env, **gpudirect_for(plan).env})


def _component(image: ImageSpec, name: str) -> tuple[bool, str | None]:
    """(present, version) of an image's component (nccl, mpi): present but of unknown version where the image
    does not describe its stack (the host's Python, a site's own image), absent where its stack says not_used."""
    spec = getattr(image, name, None)
    if spec is None:
        return True, None
    version = getattr(spec, "version", None)
    return version is not None, version


def _source_of(plan: Plan, fact: str) -> str:
    """` (DOC, WHERE)` of the system's first source about `fact`, or nothing."""
    source = next((s for s in plan.system.sources if fact in (s.about or "")), None)
    return f" ({source.doc}, {source.where})" if source else ""


def gpudirect_for(plan: Plan) -> GpuDirect:
    """GPUDirect on the plan's fabric (dlrun.nodemodel.gpudirect): the NCCL level the node model's GPU<->NIC
    path allows, PSM2's GPU buffers where the image's PSM2 has CUDA; nothing for CPU jobs and plain TCP."""
    if plan.device != "cuda" or plan.fabric == "tcp":
        return GpuDirect()
    has_nccl, nccl = _component(plan.image, "nccl")
    node = node_model(plan.system)
    found = nccl_gpudirect(node, plan.fabric, nccl, _source_of(plan, "gpudirect")) if has_nccl else GpuDirect(
        notes=(f"GPUDirect: image {plan.image.name} has no NCCL; no NCCL GPUDirect setting applies",))
    if plan.fabric != "opa":
        return found
    mpi = getattr(plan.image, "mpi", None)
    nics = node.nics.get(plan.fabric)
    env, note = psm2_gpu_env(getattr(mpi, "psm2_cuda", None), nics.gpudirect if nics else None)
    return dataclasses.replace(found, env={**found.env, **env}, notes=(*found.notes, note))
