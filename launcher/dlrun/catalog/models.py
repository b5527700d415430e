"""pydantic schemas for catalog entries. Unknown fields are errors: a typo must not pass silently."""
from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from dlrun.catalog.commands import CommandResult, check_command_fields
from dlrun.catalog.partitions import PartitionSpec, check_all
from dlrun.catalog.scheduler_options import (  # noqa: F401 (DIRECTIVE_WORD, OwnSchedulerOptions: read from here too)
    DIRECTIVE_WORD, OwnSchedulerOptions, SchedulerOptions, all_match, own_scheduler_options)
from dlrun.catalog.storage import FileSystem, check_storage_fields

Arch = Literal["x86_64", "ppc64le", "aarch64"]
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]*$"
FabricName = Literal["ib", "opa", "roce", "tcp"]
DEVICE_WORD = r"[A-Za-z0-9_.:-]+"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(Strict):
    """Where a fact or number comes from: document and table/figure/section."""

    doc: str = Field(description="The document: a paper, datasheet, manual or web page, by title or short name.")
    where: str = Field(description="Where in it: table, figure, section or page.")
    note: str | None = Field(default=None, description="What the source says, or how a value was read from it.")
    about: str | None = Field(default=None, description="Which values of the entry this source backs, "
                              "e.g. `gpus, cpu`.")


class PublishedValue(Strict):
    """A number a document published about a model, with its source."""

    value: float = Field(description="The number as published.")
    unit: str = Field(description="Its unit, e.g. `parameters`.")
    source: Source = Field(description="Where it is published.")


TRAINING_KINDS = ("cnn-training", "bert-finetuning", "llm-pretraining")
#: Collectives the harness measures over torch.distributed (`--benchmark KIND`), and what each is called in text.
COLLECTIVE_KINDS = {"allreduce": "all-reduce", "broadcast": "broadcast", "allgather": "all-gather",
                    "reducescatter": "reduce-scatter", "alltoall": "all-to-all",
                    "sendrecv": "send/receive between every pair of ranks"}
WorkloadKind = Literal["cnn-training", "bert-finetuning", "llm-pretraining", "allreduce", "broadcast", "allgather",
                       "reducescatter", "alltoall", "sendrecv", "nccl-tests", "command", "storage"]


class WorkloadSpec(Strict):
    """A workload: what a run does (a model to train, a collective or storage read to measure, a site's own
    command), as `dlrun run NAME` names it."""

    name: str = Field(pattern=NAME_PATTERN, description="The workload's name, as `dlrun run NAME` takes it.")
    description: str = Field(description="What the workload is, in words (`dlrun workloads list`).")
    kind: WorkloadKind = Field(default="cnn-training", description=(
        "What a run does. cnn-training, bert-finetuning, llm-pretraining: the harness trains `model` (a BERT "
        "model name carries its task and sequence length, e.g. bert_swag); allreduce, broadcast, allgather, "
        "reducescatter, alltoall: the harness measures that collective's bus bandwidth over the run's process "
        "group, at message sizes `min_bytes`, x `size_factor`, ..., `max_bytes`; sendrecv: every pair of ranks, "
        "both directions; nccl-tests: the image's own binary `nccl_test`, one process per GPU; command: the "
        "site's own `command`, read by its `result`; storage: the read rate of --data's files (`storage_test`)."))
    storage_test: Literal["sequential", "small-files"] | None = Field(default=None, description=(
        "kind storage: what the reader measures, sequential reads of large files (GB/s) or small files opened, "
        "read whole and closed (files/s)."))
    nccl_test: str | None = Field(default=None, pattern=r"^[a-z_]+_perf$", description=(
        "kind nccl-tests: the image's nccl-tests binary to run, e.g. all_reduce_perf."))
    framework: Literal["pytorch", "tensorflow"] = Field(default="pytorch", description=(
        "The framework the workload is written for; a run takes the harness of its image's framework, and this "
        "one's where the image runs tf_cnn_benchmarks."))
    model: str | None = Field(default=None, description=(
        "Training kinds: the model's name in the in-container harness (tf_cnn_benchmarks naming: resnet50 is "
        "v1, resnet50_v1.5 is v1.5)."))
    min_bytes: int = Field(default=8, ge=4, description="Collectives and nccl-tests: the smallest message, bytes.")
    max_bytes: int = Field(default=64 * 1024 * 1024, ge=4, description=(
        "Collectives and nccl-tests: the largest message, bytes."))
    size_factor: int = Field(default=2, ge=2, description=(
        "Collectives and nccl-tests: each message size is the previous one times this."))
    tf_cnn_model: str | None = Field(default=None, description=(
        "The model's name in tf_cnn_benchmarks (`--model`), for images that run it; none: such images cannot "
        "run this workload."))
    dataset: Literal["synthetic", "imagenet"] = Field(default="synthetic", description=(
        "A tensorflow workload's data as its comparability key records it (imagenet: real data, TFRecord "
        "files); other runs read --data's directory, synthetic data without one."))
    default_batch_size: int = Field(default=32, gt=0, description=(
        "Batch per rank when neither --batch-size nor the system (`batch_sizes`, `default_batch_size`) sets one."))
    default_steps: int = Field(default=20, gt=0, description=(
        "Timed steps (training steps, or iterations per message size) unless --steps or the system sets them."))
    default_warmup_steps: int = Field(default=5, ge=0, description=(
        "Untimed warm-up steps before timing unless --warmup-steps or the system sets them."))
    published_params: PublishedValue | None = Field(default=None, description=(
        "The model's parameter count as a document published it (`dlrun workloads show`)."))
    published_ops_per_image: PublishedValue | None = Field(default=None, description=(
        "The model's operations per image as a document published it; compare's efficiency takes it where "
        "dlrun cannot count the model's multiply-adds itself."))
    command: str | None = Field(default=None, description=(
        "kind command: the site's shell text, run by bash inside the image (dlrun.catalog.commands)."))
    run_per: Literal["rank", "node"] = Field(default="rank", description=(
        "kind command: run the command once per rank, or once per node (only each node's first rank)."))
    result: CommandResult | None = Field(default=None, description="kind command: how its result is read.")
    sources: list[Source] = Field(default=[], description="Where the workload's settings come from.")

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

    precision: PeakPrecision = Field(description="The arithmetic the rate is for (`-tensor`: on tensor cores).")
    tflops: float = Field(gt=0, description="The rate, TFLOP/s.")
    source: Source = Field(description="Where the rate is published.")


def peak_for(peaks: list[PeakRate], run_precision: str) -> PeakRate | None:
    """The nominal peak a run at `run_precision` (fp32, amp) is measured against; None when not known."""
    by_precision = {peak.precision: peak for peak in peaks}
    return next((by_precision[p] for p in RUN_PRECISION_PEAKS.get(run_precision, ()) if p in by_precision), None)


class CpuSpec(Strict):
    """The CPUs of one node."""

    model: str | None = Field(default=None, description="The processor's model name.")
    sockets: int = Field(default=1, gt=0, description="CPU sockets per node.")
    cores_per_socket: int = Field(gt=0, description="Physical cores per socket.")
    threads_per_core: int = Field(default=1, gt=0, description="Hardware threads per core (SMT).")
    numa_nodes: int = Field(default=1, gt=0, description="NUMA nodes per node (what ranks are bound to).")
    peak: list[PeakRate] = Field(default=[], description=(
        "Nominal peak rates of one socket, by precision: the ceiling a CPU run's efficiency is computed against."))

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket


class GpuSpec(Strict):
    """The GPUs of one node."""

    model: str = Field(description="The GPU's model name.")
    count_per_node: int = Field(gt=0, description="GPUs per node.")
    memory_gb: float | None = Field(default=None, description="Memory of one GPU, GB (for people).")
    memory_bandwidth_gbs: float | None = Field(default=None, gt=0, description=(
        "Bandwidth of one GPU's own memory (HBM), GB/s (for people)."))
    interconnect: str | None = Field(default=None, description=(
        "How the node's GPUs are linked, in words, e.g. NVLink hybrid cube-mesh (for people)."))
    numa_affinity: list[int] | None = Field(default=None, description=(
        "NUMA node of each GPU (index: GPU id), for binding ranks to their GPU's socket; none: not known."))
    compute_capability: str | None = Field(default=None, pattern=r"^\d+\.\d+$", description=(
        "The GPU's CUDA compute capability, e.g. 7.0: which images' CUDA can target it (dlrun.nodemodel.cuda)."))
    driver: str | None = Field(default=None, pattern=r"^\d+(\.\d+){1,2}$", description=(
        "The nodes' NVIDIA driver version, when stated: which images' CUDA it can run."))
    peak: list[PeakRate] = Field(default=[], description=(
        "Nominal peak rates of one GPU, by precision: the ceiling a GPU run's efficiency and MFU are computed "
        "against."))


class FabricConfig(Strict):
    """What a site knows about one fabric; anything left out is detected or left to NCCL/UCX defaults."""

    description: str | None = Field(default=None, description="The fabric in words, e.g. its adapters and switch.")
    speed_gbps: float | None = Field(default=None, gt=0, description=(
        "Line rate of one link (one port), Gbit/s: with `links`, what compare sets a run's bus bandwidth "
        "against, and the run's fabric rate where the node reports none."))
    links: int = Field(default=1, gt=0, description="Links (ports, rails) per node on this fabric.")
    hca: list[str] = Field(default=[], description=(
        "RDMA devices with port, e.g. mlx5_0:1 or hfi1_0:1 (NCCL_IB_HCA, UCX_NET_DEVICES); none: NCCL's and "
        "UCX's own choice."))
    interfaces: list[str] = Field(default=[], description=(
        "IP interfaces for sockets and out-of-band traffic, e.g. ib0, eth2 (NCCL_SOCKET_IFNAME, "
        "GLOO_SOCKET_IFNAME, Open MPI's btl_tcp_if_include)."))
    gid_index: int | Literal["auto"] = Field(default="auto", description=(
        "RoCE: the GID index (NCCL_IB_GID_INDEX, UCX_IB_GID_INDEX); auto: the node's RoCE v2 GID, picked at "
        "job start."))
    ucx_tls: list[str] = Field(default=[], description=(
        "ib, roce: UCX's transports (UCX_TLS); none: rc, sm, self, and cuda_copy, cuda_ipc on GPUs."))
    numa_affinity: list[int] | None = Field(default=None, description=(
        "NUMA node of each link's NIC (index: link), for the GPU<->NIC path; none: not known."))
    gpudirect: bool | None = Field(default=None, description=(
        "Whether GPUDirect RDMA works on this fabric (peer-memory driver loaded); none: not known."))

    @field_validator("hca", "interfaces", "ucx_tls")
    @classmethod
    def _device_words(cls, value: list[str]) -> list[str]:
        for item in value:
            if not re.fullmatch(DEVICE_WORD, item):
                raise ValueError(f"{item!r} is not a device or interface name (letters, digits, _ . : -)")
        return value


class SystemSpec(Strict):
    """A system profile: the nodes of one cluster or machine (its default partition), how jobs reach them, and
    where each value comes from."""

    name: str = Field(pattern=NAME_PATTERN, description="The system's name, as `--system NAME` takes it.")
    description: str = Field(description="What the system is, in words (`dlrun systems list`).")
    site: str | None = Field(default=None, description=(
        "Where the system is, or the document that describes it, in words (for people; the site runs are "
        "stored under is config.yaml's `site`)."))
    hostnames: list[str] = Field(default=[], description=(
        "Host names of the system's login and compute nodes, as regular expressions matched against the whole "
        "name: a run on such a host uses this system unless --system, $DLRUN_SYSTEM or config.yaml names one."))
    arch: Arch = Field(default="x86_64", description="The nodes' CPU architecture.")
    nodes: int = Field(gt=0, description="Nodes of the system: the most a run may use.")
    cpu: CpuSpec = Field(description="The CPUs of one node.")
    memory_gb: float = Field(gt=0, description="Memory of one node, GB.")
    gpus: GpuSpec | None = Field(default=None, description="The GPUs of one node; none: runs are on CPUs.")
    fabrics: list[FabricName] = Field(default=["tcp"], description="The interconnects a run may use (--fabric).")
    default_fabric: Literal["ib", "opa", "roce", "tcp", "auto"] = Field(default="auto", description=(
        "The fabric a run uses unless --fabric names one; auto: the first of `fabrics`."))
    fabric_config: dict[FabricName, FabricConfig] = Field(default={}, description=(
        "What the site knows about each fabric, by name."))
    storage: dict[str, FileSystem] = Field(default={}, description=(
        "The nodes' file systems by name (nvme, lustre): an experiment's `storage` axis reads from them "
        "(dlrun.catalog.storage)."))
    scheduler: str = Field(default="local", description="How jobs are started: local, or a batch scheduler (slurm, "
                           "lsf, pbs, kubernetes, ...), unless --scheduler names one.")
    launcher: str = Field(default="mpirun", description="The process launcher (mpirun, srun, torchrun, ...) unless "
                          "--launcher names one.")
    runtime: str = Field(default="host", description="The container runtime (host: none) unless --runtime names one.")
    default_image: str = Field(default="host", description="The image a run uses unless --image names one.")
    dist: Literal["ddp", "horovod"] = Field(default="ddp", description=(
        "How the PyTorch harness distributes training unless --dist says: DistributedDataParallel or Horovod."))
    batch_sizes: dict[str, int] = Field(default={}, description=(
        "Batch per rank (per GPU) by workload name, as the source used them, unless --batch-size says."))
    default_batch_size: int | None = Field(default=None, gt=0, description=(
        "Batch per rank for workloads not in `batch_sizes`; none: the workload's default."))
    default_steps: int | None = Field(default=None, gt=0, description=(
        "Timed steps unless --steps says; none: the workload's default."))
    default_warmup_steps: int | None = Field(default=None, ge=0, description=(
        "Untimed warm-up steps unless --warmup-steps says; none: the workload's default."))
    scheduler_options: SchedulerOptions = Field(default=SchedulerOptions(), validate_default=True, description=(
        "Batch job settings, checked against `scheduler`'s own options, whose defaults fill in what is left out."))
    data_loader_workers: int = Field(default=0, ge=0, description=(
        "Data-loader worker processes per rank (Ren et al.'s j) unless --data-workers says; 0: the harness's "
        "default. Passed to the harness, recorded with the result."))
    mpi: str | None = Field(default=None, description=(
        "The site's host MPI, e.g. `openmpi 4.0.1`: checked against the image's MPI (the hybrid model) where no "
        "node is probed; `dlrun doctor` warns when a node's differs."))
    sources: list[Source] = Field(default=[], description="Where the profile's values come from.")
    detected: bool = Field(default=False, description=(
        "Made from this host's probes (the `localhost` system), not written by a site."))
    partitions: dict[str, PartitionSpec] = Field(default={}, description=(
        "Other partitions whose nodes differ from the system's, by the scheduler's name for them "
        "(dlrun.catalog.partitions); --partition NAME selects one."))
    partition: str | None = Field(default=None, description=(
        "Set by dlrun, not written: which listed partition's nodes this is (a run that names one); none: the "
        "system's own."))

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

    name: str = Field(pattern=NAME_PATTERN, description="The image's tag, as `--image TAG` takes it.")
    description: str = Field(description="What the image is, in words (`dlrun images list`).")
    kind: Literal["host", "container"] = Field(default="container", description=(
        "container: an image a container runtime starts; host: this machine's own software, no container."))
    arch: list[Arch] = Field(default=["x86_64"], description="The architectures the image is built for.")
    framework: str = Field(default="pytorch", description="The deep-learning framework it holds (pytorch, tensorflow).")
    framework_version: str | None = Field(default=None, description="That framework's version.")
    runs: Literal["dlrun-harness", "tf_cnn_benchmarks"] | None = Field(default=None, description=(
        "The benchmark code its training workloads run: dlrun's harness for the framework, or "
        "tf_cnn_benchmarks; none: the harness for pytorch, tf_cnn_benchmarks for tensorflow (the TF 1.x images)."))
    python: str = Field(default="python3", description=(
        "The interpreter inside the image (for `host`: on this machine)."))
    harness_dir: str = Field(default="/opt/dlrun", description=(
        "Where dlrun's harness files are inside the image (for `host`: on this machine)."))
    uri: str | None = Field(default=None, description=(
        "The repository, without tag; the image for one architecture is `<uri>:<arch>`."))
    digest: str | None = Field(default=None, description=(
        "The image ID (sha256 of the image config, which lists every layer's content digest), the same in Docker "
        "and Podman and across save, load, push and pull; filled from the site's image lock."))
    repo_digest: str | None = Field(default=None, description=(
        "Filled per plan from the image lock, never written: `<registry>/<repo>@sha256:...` (the manifest "
        "digest) after a push or pull."))
    rootfs: str | None = Field(default=None, description=(
        "Filled per plan from the image store, never written: the unpacked root file system (charliecloud)."))
    sif: str | None = Field(default=None, description=(
        "Filled per plan from the image store, never written: the Singularity/Apptainer image file."))
    squashfs: str | None = Field(default=None, description=(
        "Filled per plan, never written: enroot's squashfs file, when the lock records one (pyxis runs it)."))
    horovod_version: str | None = Field(default=None, description=(
        "Horovod for PyTorch in the image (`--dist horovod`); pinned images say it in their `horovod:` entry."))
    sources: list[Source] = Field(default=[], description="Where the image's facts come from.")

    @property
    def harness_framework(self) -> str | None:
        """The framework of the dlrun harness it runs (`harness_<framework>.py`); None: tf_cnn_benchmarks."""
        runs = self.runs or ("tf_cnn_benchmarks" if self.framework == "tensorflow" else "dlrun-harness")
        return None if runs == "tf_cnn_benchmarks" else self.framework

    def horovod_release(self) -> str | None:
        """The image's Horovod version; None when it has none."""
        return self.horovod_version
