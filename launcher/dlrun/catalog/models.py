"""pydantic schemas for catalog entries. Unknown fields are errors: a typo must not pass silently."""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from dlrun.catalog.commands import CommandResult, check_command_fields
from dlrun.catalog.partitions import PartitionSpec, check_all
from dlrun.catalog.storage import FileSystem, check_storage_fields
from dlrun.catalog.time_limits import time_limit_seconds
from dlrun.errors import DlrunError
from dlrun.registry import SCHEDULERS

Arch = Literal["x86_64", "ppc64le", "aarch64"]
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]*$"
FabricName = Literal["ib", "opa", "roce", "tcp"]
# Words that land in scheduler directives (#SBATCH, #BSUB, #PBS), which no shell quoting protects. A leading
# `-` would make the value the next option (`#BSUB -q -x` asks for exclusive nodes, not queue "-x").
DIRECTIVE_WORD = r"^[A-Za-z0-9_.,:+=@%/][A-Za-z0-9_.,:+=@%/-]*$"
DEVICE_WORD = r"[A-Za-z0-9_.:-]+"


def all_match(values, pattern: str, what: str):
    """`values` (or a mapping's keys) when each matches `pattern` whole; else ValueError naming the first
    that does not, as `what` says a valid one looks."""
    for item in values:
        if not re.fullmatch(pattern, item):
            raise ValueError(f"{item!r} is not {what}")
    return values


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(Strict):
    """Where a fact or number comes from: document and table/figure/section."""

    doc: str
    where: str
    note: str | None = None
    about: str | None = None  # which values of the entry this source backs, e.g. "gpus, cpu"


class PublishedValue(Strict):
    value: float
    unit: str
    source: Source


TRAINING_KINDS = ("cnn-training", "bert-finetuning", "llm-pretraining")
#: Collectives the harness measures over torch.distributed (`--benchmark KIND`), and what each is called in text.
COLLECTIVE_KINDS = {"allreduce": "all-reduce", "broadcast": "broadcast", "allgather": "all-gather",
                    "reducescatter": "reduce-scatter", "alltoall": "all-to-all",
                    "sendrecv": "send/receive between every pair of ranks"}
WorkloadKind = Literal["cnn-training", "bert-finetuning", "llm-pretraining", "allreduce", "broadcast", "allgather",
                       "reducescatter", "alltoall", "sendrecv", "nccl-tests", "command", "storage"]


class WorkloadSpec(Strict):
    name: str = Field(pattern=NAME_PATTERN)
    description: str
    # cnn-training, bert-finetuning: the harness trains `model` (a BERT model name carries its task and sequence
    # length, e.g. bert_swag); allreduce, broadcast, allgather, reducescatter, alltoall: the harness measures that
    # collective's bus bandwidth over the run's process group (message sizes min_bytes, x size_factor, ...,
    # max_bytes); sendrecv: every pair of ranks, both directions; nccl-tests: the image's own binary `nccl_test`, one
    # process per GPU; command: the site's own `command` and `result` contract (dlrun.catalog.commands); storage:
    # the read rate of --data's files, `storage_test` sequential (GB/s) or small-files (files/s): catalog.storage.
    kind: WorkloadKind = "cnn-training"
    storage_test: Literal["sequential", "small-files"] | None = None
    nccl_test: str | None = Field(default=None, pattern=r"^[a-z_]+_perf$")
    framework: Literal["pytorch", "tensorflow"] = "pytorch"
    # Model name in the in-container harness (tf_cnn_benchmarks naming: resnet50 is v1, resnet50_v1.5 is v1.5).
    model: str | None = None
    min_bytes: int = Field(default=8, ge=4)
    max_bytes: int = Field(default=64 * 1024 * 1024, ge=4)
    size_factor: int = Field(default=2, ge=2)
    tf_cnn_model: str | None = None
    dataset: Literal["synthetic", "imagenet"] = "synthetic"
    default_batch_size: int = Field(default=32, gt=0)
    default_steps: int = Field(default=20, gt=0)
    default_warmup_steps: int = Field(default=5, ge=0)
    published_params: PublishedValue | None = None
    published_ops_per_image: PublishedValue | None = None
    command: str | None = None
    run_per: Literal["rank", "node"] = "rank"
    result: CommandResult | None = None
    sources: list[Source] = []

    @property
    def trains(self) -> bool:
        """Whether the workload trains a model (batch, precision, steps) rather than measures communication."""
        return self.kind in TRAINING_KINDS

    @model_validator(mode="after")
    def _kind_fields(self) -> "WorkloadSpec":
        if self.trains and not self.model:
            raise ValueError(f"a {self.kind} workload needs `model` (the harness's model name)")
        if not self.trains and (self.model or self.tf_cnn_model):
            raise ValueError(f"kind {self.kind} trains no model: leave out `model` and `tf_cnn_model`")
        if (self.kind == "nccl-tests") != bool(self.nccl_test):
            raise ValueError("a nccl-tests workload needs `nccl_test` (the binary, e.g. all_reduce_perf)" if self.kind
                             == "nccl-tests" else f"kind {self.kind} runs no nccl-tests binary: leave out `nccl_test`")
        if self.min_bytes > self.max_bytes:
            raise ValueError(f"min_bytes {self.min_bytes} exceeds max_bytes {self.max_bytes}")
        check_command_fields(self), check_storage_fields(self)
        return self

    @property
    def label(self) -> str:
        """The model, or what a communication workload measures."""
        return self.model or self.nccl_test or self.storage_test or self.kind

    @property
    def measures(self) -> str:
        """What a communication workload measures, in words (all-reduce, all-to-all, all_gather_perf)."""
        return COLLECTIVE_KINDS.get(self.kind) or self.nccl_test or self.storage_test or self.kind


PeakPrecision = Literal["fp64", "fp32", "tf32-tensor", "fp16", "fp16-tensor", "bf16-tensor", "fp8-tensor"]
# The peaks bounding a run, fastest first: amp runs on tensor units where present (fp16 autocast), else fp16.
RUN_PRECISION_PEAKS: dict[str, tuple[str, ...]] = {
    "fp32": ("fp32",), "tf32": ("tf32-tensor",), "fp16": ("fp16-tensor", "fp16"), "bf16": ("bf16-tensor",),
    "amp": ("fp16-tensor", "bf16-tensor", "fp16")}


class PeakRate(Strict):
    """Nominal peak arithmetic rate of one device (one GPU, or one CPU socket): dense, no sparsity."""

    precision: PeakPrecision
    tflops: float = Field(gt=0)
    source: Source


def peak_for(peaks: list[PeakRate], run_precision: str) -> PeakRate | None:
    """The nominal peak a run at `run_precision` (fp32, amp) is measured against; None when not known."""
    by_precision = {peak.precision: peak for peak in peaks}
    return next((by_precision[p] for p in RUN_PRECISION_PEAKS.get(run_precision, ()) if p in by_precision), None)


class CpuSpec(Strict):
    model: str | None = None
    sockets: int = Field(default=1, gt=0)
    cores_per_socket: int = Field(gt=0)
    threads_per_core: int = Field(default=1, gt=0)
    numa_nodes: int = Field(default=1, gt=0)
    peak: list[PeakRate] = []  # per socket

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket


class GpuSpec(Strict):
    model: str
    count_per_node: int = Field(gt=0)
    memory_gb: float | None = None
    memory_bandwidth_gbs: float | None = Field(default=None, gt=0)  # the GPU's own memory (HBM), GB/s
    interconnect: str | None = None
    # NUMA node of each GPU (index = GPU id), for CPU binding; None when unknown.
    numa_affinity: list[int] | None = None
    compute_capability: str | None = Field(default=None, pattern=r"^\d+\.\d+$")  # e.g. 7.0: dlrun.nodemodel.cuda
    driver: str | None = Field(default=None, pattern=r"^\d+(\.\d+){1,2}$")  # the nodes' NVIDIA driver, when stated
    peak: list[PeakRate] = []  # per GPU


class FabricConfig(Strict):
    """What a site knows about one fabric; anything left out is detected or left to NCCL/UCX defaults."""

    description: str | None = None
    speed_gbps: float | None = Field(default=None, gt=0)  # line rate of one link (one port)
    links: int = Field(default=1, gt=0)                   # links (ports, rails) per node on this fabric
    hca: list[str] = []         # RDMA devices with port, e.g. mlx5_0:1 or hfi1_0:1 (NCCL_IB_HCA, UCX_NET_DEVICES)
    interfaces: list[str] = []  # IP interfaces for sockets and out-of-band traffic, e.g. ib0, eth2
    gid_index: int | Literal["auto"] = "auto"  # RoCE: "auto" picks the RoCE v2 GID on the node at job start
    ucx_tls: list[str] = []
    numa_affinity: list[int] | None = None  # NUMA node of each link's NIC (index = link), for GPU<->NIC paths
    gpudirect: bool | None = None  # GPUDirect RDMA works on this fabric (peer-memory driver loaded); None: unknown

    @field_validator("hca", "interfaces", "ucx_tls")
    @classmethod
    def _device_words(cls, value: list[str]) -> list[str]:
        for item in value:
            if not re.fullmatch(DEVICE_WORD, item):
                raise ValueError(f"{item!r} is not a device or interface name (letters, digits, _ . : -)")
        return value


class SchedulerOptions(BaseModel):
    """Batch job settings every scheduler takes. Values go into scheduler directives, so they are restricted
    to plain words. A scheduler's own settings (Slurm's qos and srun_mpi, LSF's alloc flags, a Kubernetes
    namespace) are declared by the scheduler (`Scheduler.options`, a subclass) and ride here as extra fields:
    a system's are checked against its scheduler when the system is loaded (`own_scheduler_options`)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    partition: str | None = Field(default=None, pattern=DIRECTIVE_WORD)  # Slurm partition, LSF/PBS queue
    account: str | None = Field(default=None, pattern=DIRECTIVE_WORD)    # Slurm account, LSF -P, PBS -A
    # Wall-clock limit: MINUTES, HH:MM, HH:MM:SS or D-HH:MM:SS. A dead rank can never hold nodes longer.
    time: str | None = Field(default="00:30:00", pattern=r"^(\d+-)?\d+(:\d{2}){0,2}$")
    exclusive: bool = False
    extra: list[str] = []  # further directives, e.g. --mem=0

    @field_validator("time")
    @classmethod
    def _a_limit(cls, value: str | None) -> str | None:
        if value is not None:
            time_limit_seconds(value)  # every field within its range, the whole within MAX_TIME_LIMIT_S
        return value

    @field_validator("extra")
    @classmethod
    def _directive_flags(cls, value: list[str]) -> list[str]:
        return all_match(value, r"-{1,2}[A-Za-z][A-Za-z0-9_-]*(=[A-Za-z0-9_.,:+=@%/-]+)?",
                         "a plain scheduler flag (like --mem=0)")

    def time_seconds(self) -> int | None:
        """The limit in seconds (`time_limit_seconds`)."""
        return None if self.time is None else time_limit_seconds(self.time)

    def time_minutes(self) -> int | None:
        """The limit in whole minutes, rounded up: a batch limit is never shorter than the one asked for."""
        seconds = self.time_seconds()
        return None if seconds is None else -(-seconds // 60)

    def hhmmss(self) -> str | None:
        minutes = self.time_minutes()
        return None if minutes is None else f"{minutes // 60:02d}:{minutes % 60:02d}:00"


class OwnSchedulerOptions(SchedulerOptions):
    """The base of a scheduler's own options model: its fields and the common ones, nothing else."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def own_scheduler_options(scheduler: str, options: SchedulerOptions) -> SchedulerOptions:
    """`options` checked against the options `scheduler` declares, its defaults filled in. A name that is
    no scheduler (or one that cannot load here) is left to the plan, which refuses it when it is chosen."""
    try:
        model = SCHEDULERS.get_class(scheduler).options
    except DlrunError:
        return options
    try:
        own = model.model_validate(options.model_dump())
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(part) for part in err["loc"])
        takes = ", ".join(sorted(model.model_fields))
        raise ValueError(f"{field}: {err['msg']} (scheduler {scheduler} takes {takes})") from None
    return SchedulerOptions(**own.model_dump())


class SystemSpec(Strict):
    name: str = Field(pattern=NAME_PATTERN)
    description: str
    site: str | None = None
    # Host names of this system's login and compute nodes, as regular expressions matched against the whole
    # name: a run on such a host uses this system unless --system, $DLRUN_SYSTEM or config.yaml names one.
    hostnames: list[str] = []
    arch: Arch = "x86_64"
    nodes: int = Field(gt=0)
    cpu: CpuSpec
    memory_gb: float = Field(gt=0)
    gpus: GpuSpec | None = None
    fabrics: list[FabricName] = ["tcp"]
    default_fabric: Literal["ib", "opa", "roce", "tcp", "auto"] = "auto"
    fabric_config: dict[FabricName, FabricConfig] = {}
    storage: dict[str, FileSystem] = {}  # file systems by name (nvme, lustre): dlrun.catalog.storage
    scheduler: str = "local"
    launcher: str = "mpirun"
    runtime: str = "host"
    default_image: str = "host"
    # How the PyTorch harness distributes training unless --dist says: DistributedDataParallel or Horovod.
    dist: Literal["ddp", "horovod"] = "ddp"
    # Per-rank (per-GPU) batch sizes by workload name, as the source used them.
    batch_sizes: dict[str, int] = {}
    # Per-rank batch for workloads not in batch_sizes; None falls back to the workload's default.
    default_batch_size: int | None = Field(default=None, gt=0)
    # Timed and warm-up steps unless given on the command line; None: the workload's defaults.
    default_steps: int | None = Field(default=None, gt=0)
    default_warmup_steps: int | None = Field(default=None, ge=0)
    # Checked against `scheduler`'s own options, whose defaults fill in what a system leaves out.
    scheduler_options: SchedulerOptions = Field(default=SchedulerOptions(), validate_default=True)
    # Data-loader worker processes per GPU (Ren et al.'s j); passed to the harness, recorded with the result.
    data_loader_workers: int = Field(default=0, ge=0)
    # The site's host MPI and PMI, for the hybrid-model compatibility check, e.g. "openmpi 4.0.1".
    mpi: str | None = None
    sources: list[Source] = []
    detected: bool = False
    # Partitions whose nodes differ from the system's (dlrun.catalog.partitions); `partition`: which one this is
    # (set when a run names one: partitions.select; None: the system's own nodes).
    partitions: dict[str, PartitionSpec] = {}
    partition: str | None = None

    @model_validator(mode="after")
    def _partitions_merge(self) -> "SystemSpec":
        all_match(self.partitions, DIRECTIVE_WORD, "a partition name (letters, digits, _ . , : + = @ % / -)")
        check_all(self)
        return self

    @property
    def gpus_per_node(self) -> int:
        return self.gpus.count_per_node if self.gpus else 0

    @field_validator("hostnames")
    @classmethod
    def _host_patterns(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"bad regular expression {pattern!r}: {exc}") from None
        return value

    @field_validator("scheduler_options")
    @classmethod
    def _scheduler_takes_them(cls, value: SchedulerOptions, info: ValidationInfo) -> SchedulerOptions:
        return own_scheduler_options(info.data["scheduler"], value) if "scheduler" in info.data else value

    @field_validator("batch_sizes")
    @classmethod
    def _positive_batches(cls, value: dict[str, int]) -> dict[str, int]:
        for workload, batch in value.items():
            if batch <= 0:
                raise ValueError(f"batch size for {workload} must be > 0, got {batch}")
        return value


#: The models of dlrun's TensorFlow 2 harness (harness_tensorflow.py's MODEL_NAMES; a test keeps them equal).
TF2_HARNESS_MODELS = ("alexnet", "inception3", "lenet", "resnet101", "resnet101_v1.5", "resnet152", "resnet152_v1.5",
                      "resnet18", "resnet34", "resnet50", "resnet50_v1.5", "trivial", "vgg16")


class ImageSpec(Strict):
    """What the launcher needs of an image. The full pinned stack lives in containers/<tag>/image.yaml
    (dlrun.catalog.stack.PinnedImageSpec, a subclass)."""

    name: str = Field(pattern=NAME_PATTERN)
    description: str
    kind: Literal["host", "container"] = "container"
    arch: list[Arch] = ["x86_64"]
    framework: str = "pytorch"
    framework_version: str | None = None
    # The benchmark code its training workloads run: dlrun's harness for the framework, or tf_cnn_benchmarks.
    # Default: dlrun's harness for pytorch, tf_cnn_benchmarks for tensorflow (the TF 1.x images).
    runs: Literal["dlrun-harness", "tf_cnn_benchmarks"] | None = None
    # Interpreter and harness location inside the image; for `host` they are resolved on this machine.
    python: str = "python3"
    harness_dir: str = "/opt/dlrun"
    uri: str | None = None  # repository without tag; the image for one architecture is `<uri>:<arch>`
    # Content digest: the image ID (sha256 of the image config, which lists every layer's content digest).
    # Identical in Docker and Podman and across save/load/push/pull. Filled from the site's image lock.
    digest: str | None = None
    # Filled per plan from the site's image lock and image store (never written in YAML):
    repo_digest: str | None = None  # `<registry>/<repo>@sha256:...` (manifest digest) after a push or pull
    rootfs: str | None = None       # unpacked root filesystem (charliecloud)
    sif: str | None = None          # Singularity/Apptainer image file
    squashfs: str | None = None     # enroot's squashfs file, when the lock records one (pyxis runs it)
    # Horovod for PyTorch in the image (`--dist horovod`); pinned images say it in their `horovod:` entry.
    horovod_version: str | None = None
    sources: list[Source] = []

    @property
    def harness_framework(self) -> str | None:
        """The framework of the dlrun harness it runs (`harness_<framework>.py`); None: tf_cnn_benchmarks."""
        runs = self.runs or ("tf_cnn_benchmarks" if self.framework == "tensorflow" else "dlrun-harness")
        return None if runs == "tf_cnn_benchmarks" else self.framework

    def horovod_release(self) -> str | None:
        """The image's Horovod version; None when it has none."""
        return self.horovod_version
