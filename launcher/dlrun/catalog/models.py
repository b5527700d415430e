"""pydantic schemas for catalog entries. Unknown fields are errors: a typo must not pass silently."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Arch = Literal["x86_64", "ppc64le", "aarch64"]
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+-]*$"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(Strict):
    """Where a fact or number comes from: document and table/figure/section."""

    doc: str
    where: str
    note: str | None = None


class PublishedValue(Strict):
    value: float
    unit: str
    source: Source


class WorkloadSpec(Strict):
    name: str = Field(pattern=NAME_PATTERN)
    description: str
    kind: Literal["cnn-training"] = "cnn-training"
    framework: Literal["pytorch", "tensorflow"] = "pytorch"
    # Model name in the in-container harness (tf_cnn_benchmarks naming: resnet50 is v1, resnet50_v1.5 is v1.5).
    model: str
    tf_cnn_model: str | None = None
    dataset: Literal["synthetic", "imagenet"] = "synthetic"
    default_batch_size: int = Field(default=32, gt=0)
    default_steps: int = Field(default=20, gt=0)
    default_warmup_steps: int = Field(default=5, ge=0)
    published_params: PublishedValue | None = None
    published_ops_per_image: PublishedValue | None = None
    sources: list[Source] = []


class CpuSpec(Strict):
    model: str | None = None
    sockets: int = Field(default=1, gt=0)
    cores_per_socket: int = Field(gt=0)
    threads_per_core: int = Field(default=1, gt=0)
    numa_nodes: int = Field(default=1, gt=0)

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket


class GpuSpec(Strict):
    model: str
    count_per_node: int = Field(gt=0)
    memory_gb: float | None = None
    interconnect: str | None = None
    # NUMA node of each GPU (index = GPU id), for CPU binding; None when unknown.
    numa_affinity: list[int] | None = None


class SystemSpec(Strict):
    name: str = Field(pattern=NAME_PATTERN)
    description: str
    site: str | None = None
    arch: Arch = "x86_64"
    nodes: int = Field(gt=0)
    cpu: CpuSpec
    memory_gb: float = Field(gt=0)
    gpus: GpuSpec | None = None
    fabrics: list[Literal["ib", "opa", "roce", "tcp"]] = ["tcp"]
    default_fabric: Literal["ib", "opa", "roce", "tcp", "auto"] = "auto"
    scheduler: str = "local"
    launcher: str = "mpirun"
    runtime: str = "host"
    default_image: str = "host"
    # Per-rank (per-GPU) batch sizes by workload name, as the source used them.
    batch_sizes: dict[str, int] = {}
    # Per-rank batch for workloads not in batch_sizes; None falls back to the workload's default.
    default_batch_size: int | None = Field(default=None, gt=0)
    scheduler_options: dict[str, str] = {}
    sources: list[Source] = []
    detected: bool = False

    @property
    def gpus_per_node(self) -> int:
        return self.gpus.count_per_node if self.gpus else 0

    @field_validator("batch_sizes")
    @classmethod
    def _positive_batches(cls, value: dict[str, int]) -> dict[str, int]:
        for workload, batch in value.items():
            if batch <= 0:
                raise ValueError(f"batch size for {workload} must be > 0, got {batch}")
        return value


class ImageSpec(Strict):
    """What the launcher needs of an image. The full pinned stack lives in containers/<tag>/image.yaml."""

    name: str = Field(pattern=NAME_PATTERN)
    description: str
    kind: Literal["host", "container"] = "container"
    arch: list[Arch] = ["x86_64"]
    framework: str = "pytorch"
    framework_version: str | None = None
    # Interpreter and harness location inside the image; for `host` they are resolved on this machine.
    python: str = "python3"
    harness_dir: str = "/opt/dlrun"
    uri: str | None = None
    digest: str | None = None
    sources: list[Source] = []
