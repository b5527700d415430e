"""The pinned software stack of a container image: one model per component, each with its provenance.

Every version is exact (no ranges, no `latest`) and says where it comes from: `stated_in` quotes the
source that names it, `chosen` explains a version the source did not state. A component the stack does
not have is written `{not_used: "why"}`, so a forgotten component cannot pass as an absent one.
"""
from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dlrun.catalog.models import ImageSpec, all_match

Arch = Literal["x86_64", "ppc64le", "aarch64"]
SHA256 = r"^sha256:[0-9a-f]{64}$"
COMMIT = r"^[0-9a-f]{40}$"
UNPINNED = {"latest", "master", "main", "head", "stable", "nightly", "*", "any", ""}
VERSION = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+_~:-]*$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def check_version(value: str) -> str:
    if value.lower() in UNPINNED or not VERSION.match(value) or any(c in value for c in "<>=!,*^ "):
        raise ValueError(f"{value!r} is not a pinned version; write one exact version, e.g. 4.0.1")
    return value


class Provenance(Strict):
    """Exactly one of: the source states the value, or we chose it (and why)."""

    stated_in: str | None = None
    chosen: str | None = None

    @model_validator(mode="after")
    def _one_reason(self):
        if bool(self.stated_in) == bool(self.chosen):
            raise ValueError("give exactly one of stated_in (the source names this value) or chosen "
                             "(not stated in the source: what was chosen and why)")
        return self

    @property
    def stated(self) -> bool:
        return bool(self.stated_in)

    @property
    def note(self) -> str:
        return self.stated_in if self.stated_in else f"not stated in the source; {self.chosen}"


class Pin(Provenance):
    version: str

    @field_validator("version")
    @classmethod
    def _exact_version(cls, value: str) -> str:
        return check_version(value)


class NotUsed(Strict):
    """The stack has no such component, and why (e.g. `native distributed TensorFlow over gRPC`)."""

    not_used: str = Field(min_length=3)


class BaseImage(Provenance):
    image: str = Field(pattern=r"^[a-z0-9][a-z0-9._/-]*(:[0-9]+)?[a-z0-9._/-]*$")
    tag: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
    digest: str | None = Field(default=None, pattern=SHA256)

    @field_validator("tag")
    @classmethod
    def _not_latest(cls, value: str) -> str:
        if value.lower() in UNPINNED:
            raise ValueError(f"tag {value!r} moves; pin a release tag (and the digest where known)")
        return value

    @property
    def reference(self) -> str:
        ref = f"{self.image}:{self.tag}"
        return f"{ref}@{self.digest}" if self.digest else ref


class OsSpec(Provenance):
    distro: Literal["ubuntu", "debian"]
    version: str

    @field_validator("version")
    @classmethod
    def _exact_version(cls, value: str) -> str:
        return check_version(value)


Provider = Literal["base", "apt", "conda", "pip", "source"]


class ForwardCompat(Strict):
    """The CUDA forward-compatibility package the image carries: the older data-center driver branches its CUDA
    runs on (each branch's minimum release, e.g. 535.86 for R535), as the image's release notes list them."""

    drivers: list[str] = Field(min_length=1)
    stated_in: str


class CudaSpec(Pin):
    provided_by: Literal["base", "conda"] = "base"
    forward_compat: ForwardCompat | None = None  # None: the image's CUDA needs its own minimum driver


class CudnnSpec(Pin):
    # apt: NVIDIA's libcudnnN packages at exactly this version; pip: bundled in the framework's wheel
    provided_by: Literal["base", "apt", "conda", "pip"] = "base"
    apt_version: str | None = None  # the Debian package version, e.g. 7.4.2.24-1+cuda10.0 (provided_by apt)

    @model_validator(mode="after")
    def _apt_version(self):
        if self.provided_by == "apt" and not self.apt_version:
            raise ValueError("apt_version: required when provided_by is apt (e.g. 7.4.2.24-1+cuda10.0)")
        return self


class NcclSpec(Pin):
    provided_by: Literal["base", "apt", "conda", "pip"] = "base"


class UcxSpec(Pin):
    provided_by: Literal["base", "source", "apt"] = "source"


class MpiSpec(Pin):
    flavour: Literal["openmpi", "hpcx"]
    provided_by: Literal["base", "source", "apt"] = "source"
    prefix: str = "/usr/local/openmpi"
    cuda_aware: bool
    pmi: list[Literal["pmix", "pmi2"]] = Field(min_length=1)
    ucx: UcxSpec | NotUsed
    verbs: bool
    psm2: bool
    psm2_cuda: bool = False  # the PSM2 library is built with CUDA (PSM2_CUDA / PSM2_GPUDIRECT take GPU buffers)
    # PSM2 (Omni-Path) exists for x86_64 only; per-architecture overrides of `psm2`.
    psm2_by_arch: dict[Arch, bool] = {}

    def psm2_for(self, arch: str) -> bool:
        return self.psm2_by_arch.get(arch, self.psm2)  # type: ignore[call-overload]

    def describe(self, arch: str | None = None) -> str:
        parts = [f"{self.flavour} {self.version}"]
        if self.cuda_aware:
            parts.append("CUDA-aware")
        parts.append("+".join(self.pmi))
        if isinstance(self.ucx, UcxSpec):
            parts.append(f"UCX {self.ucx.version}")
        if self.verbs:
            parts.append("verbs")
        if self.psm2_for(arch) if arch else self.psm2:
            parts.append("PSM2")
        return ", ".join(parts)


PIP_PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9_,-]+\])?==[0-9A-Za-z][0-9A-Za-z.+_-]*$")
CONDA_PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*=[0-9A-Za-z][0-9A-Za-z.+_]*(=[0-9A-Za-z._]+)?$")


class GitRef(Provenance):
    """A repository at one commit; the branch or tag is kept for people, the commit is what is built.

    A release tag alone is accepted where the commit could not be looked up (tags are not moved in the
    projects we use); a branch always needs its commit."""

    repo: str = Field(pattern=r"^https://[A-Za-z0-9./_-]+$")
    ref: str | None = None  # branch or tag the commit was taken from
    commit: str | None = Field(default=None, pattern=COMMIT)

    @model_validator(mode="after")
    def _commit_or_tag(self):
        if self.commit is None and not (self.ref and re.fullmatch(r"v?[0-9]+(\.[0-9]+)+", self.ref)):
            raise ValueError(f"commit: required for {self.repo} (a branch moves; only a release tag may stand alone)")
        return self

    @property
    def revision(self) -> str:
        return self.commit or str(self.ref)


class SourceBuild(Strict):
    """Build the framework from source (Han et al. built TensorFlow 1.8 for POWER themselves)."""

    git: GitRef
    bazel: Pin
    # Environment for TensorFlow's ./configure (TF_NEED_CUDA, TF_CUDA_COMPUTE_CAPABILITIES, ...)
    configure_env: dict[str, str]
    configure_env_by_arch: dict[Arch, dict[str, str]] = {}  # e.g. CC_OPT_FLAGS=-mcpu=power8
    # Extra OS packages the build needs, per architecture (e.g. a JDK to bootstrap Bazel on ppc64le).
    packages_by_arch: dict[Arch, list[str]] = {}


class FrameworkInstall(Provenance):
    method: Literal["base", "pip", "conda", "apt", "source"]
    packages: list[str] = []
    channels: list[str] = []       # conda channels, in priority order
    index_url: str | None = None   # pip --extra-index-url / find-links (e.g. PyTorch's CUDA wheels)
    conda: Pin | None = None       # the Miniconda installer version (method conda)
    env: dict[str, str] = {}       # environment the installer needs (e.g. license acceptance)
    source: SourceBuild | None = None

    @model_validator(mode="after")
    def _pinned_packages(self):
        pattern = {"pip": PIP_PIN, "conda": CONDA_PIN}.get(self.method)
        for index, package in enumerate(self.packages):
            if self.method == "apt" and not re.match(r"^[a-z0-9][a-z0-9.+-]*=[0-9A-Za-z.+~:-]+$", package):
                raise ValueError(f"packages[{index}]: {package!r} is not pinned; write NAME=VERSION")
            if pattern is not None and not pattern.match(package):
                sep = "==" if self.method == "pip" else "="
                raise ValueError(f"packages[{index}]: {package!r} is not pinned; write NAME{sep}VERSION")
        if self.method in ("pip", "conda", "apt") and not self.packages:
            raise ValueError(f"method {self.method} needs the pinned packages to install")
        if self.method == "conda" and self.conda is None:
            raise ValueError("method conda needs `conda: {version: ...}` (the Miniconda installer)")
        if self.method == "source" and self.source is None:
            raise ValueError("method source needs `source:` (repository, commit, build tool)")
        return self


class HorovodSpec(Pin):
    # Build flags, e.g. HOROVOD_GPU_ALLREDUCE=NCCL, HOROVOD_WITH_TENSORFLOW=1; the build runs with exactly these.
    build_env: dict[str, str]

    @field_validator("build_env")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        return all_match(value, r"HOROVOD_[A-Z0-9_]+", "a Horovod build flag (HOROVOD_...)")


class Benchmark(GitRef):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    path: str = Field(pattern=r"^/[A-Za-z0-9_./-]+$")  # where it lives in the image


class NcclTests(GitRef):
    version: str  # release tag, e.g. v2.0.0
    mpi: Literal[True] = True  # built with MPI=1 so that one test spans nodes
    path: str = "/usr/local/nccl-tests"

    @field_validator("version")
    @classmethod
    def _exact_version(cls, value: str) -> str:
        return check_version(value)


class Harness(Strict):
    """dlrun's own in-container harness scripts, copied from launcher/dlrun/harness at build time."""

    files: list[str] = []

    @field_validator("files")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        return all_match(value, r"harness_[a-z0-9_]+\.py", "a harness script (harness_<framework>.py)")


class DebianPackage(Strict):
    """A Debian package at one version (binNMU suffixes `+bN` of other architectures are accepted)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.+-]+$")
    version: str

    @field_validator("version")
    @classmethod
    def _exact_version(cls, value: str) -> str:
        return check_version(value)

    def matches(self, installed: str) -> bool:
        return installed == self.version or re.fullmatch(re.escape(self.version) + r"\+b[0-9]+", installed) is not None


class Debootstrap(Provenance):
    """How the image is built without any registry: debootstrap from a Debian mirror (cpu-reference)."""

    suite: str
    variant: Literal["minbase"] = "minbase"
    mirror: str = Field(pattern=r"^https?://[A-Za-z0-9./_-]+$")
    packages: list[DebianPackage] = Field(min_length=1)


class PinnedImageSpec(ImageSpec):
    """`containers/<tag>/image.yaml`: the single source of truth for an image's Dockerfile and Singularity
    definition per architecture. Every component key must be present; versions are exact."""

    kind: Literal["container"] = "container"
    uri: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*(:[0-9]+)?(/[a-z0-9][a-z0-9._-]*)+$")  # repository, no tag
    framework_version: str
    base: dict[Arch, BaseImage]
    os: OsSpec
    python_version: Pin
    cuda: CudaSpec | NotUsed
    cudnn: CudnnSpec | NotUsed
    nccl: NcclSpec | NotUsed
    mpi: MpiSpec | NotUsed
    framework_install: FrameworkInstall
    horovod: HorovodSpec | NotUsed
    benchmarks: list[Benchmark]
    nccl_tests: NcclTests | NotUsed
    harness: Harness
    packages: list[str] = []                       # further OS packages, all architectures
    packages_by_arch: dict[Arch, list[str]] = {}   # OS packages that exist on one architecture only
    env: dict[str, str] = {}
    labels: dict[str, str] = {}
    debootstrap: Debootstrap | None = None

    @field_validator("framework_version")
    @classmethod
    def _exact_version(cls, value: str) -> str:
        return check_version(value)

    def horovod_release(self) -> str | None:
        return self.horovod.version if isinstance(self.horovod, HorovodSpec) else None

    @model_validator(mode="after")
    def _consistent(self):
        if set(self.base) != set(self.arch):
            raise ValueError(f"base: give one base image per architecture in arch ({', '.join(self.arch)}); "
                             f"got {', '.join(self.base) or 'none'}")
        extra = set(self.packages_by_arch) - set(self.arch)
        if extra:
            raise ValueError(f"packages_by_arch: {', '.join(sorted(extra))} is not in arch ({', '.join(self.arch)})")
        if self.debootstrap is not None and self.os.distro != "debian":
            raise ValueError("debootstrap: only a Debian image can be bootstrapped from a Debian mirror")
        if self.horovod_version is not None:
            raise ValueError("horovod_version: a pinned image states its Horovod in `horovod:` (version, build_env)")
        if isinstance(self.horovod, HorovodSpec) and isinstance(self.mpi, NotUsed):
            raise ValueError("horovod: Horovod is built with MPI here; the stack has mpi: not_used")
        if isinstance(self.nccl_tests, NcclTests) and (isinstance(self.mpi, NotUsed) or isinstance(self.nccl, NotUsed)):
            raise ValueError("nccl_tests: built with MPI=1 against the image's NCCL; the stack lacks MPI or NCCL")
        return self

    def reference(self, arch: str) -> str:
        """Where this image lives once built, pulled or loaded: `<uri>:<arch>`."""
        return f"{self.uri}:{arch}"

    def base_for(self, arch: str) -> BaseImage:
        return self.base[arch]  # type: ignore[index]

    def os_packages(self, arch: str) -> list[str]:
        return sorted(set(self.packages) | set(self.packages_by_arch.get(arch, [])))  # type: ignore[call-overload]
