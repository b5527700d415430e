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

    stated_in: str | None = Field(default=None, description="The source that names this value, and where in it.")
    chosen: str | None = Field(default=None, description="Not stated in the source: what was chosen, and why.")

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
    """One component at one exact version."""

    version: str = Field(description="The exact version (no range, no `latest`).")

    @field_validator("version")
    @classmethod
    def _exact_version(cls, value: str) -> str:
        return check_version(value)


class NotUsed(Strict):
    """The stack has no such component, and why (e.g. `native distributed TensorFlow over gRPC`)."""

    not_used: str = Field(min_length=3, description="Why the stack has no such component.")


class BaseImage(Provenance):
    """The image one architecture's build starts from."""

    image: str = Field(pattern=r"^[a-z0-9][a-z0-9._/-]*(:[0-9]+)?[a-z0-9._/-]*$", description=(
        "The base image's repository, e.g. nvcr.io/nvidia/pytorch."))
    tag: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$", description="Its release tag (never latest).")
    digest: str | None = Field(default=None, pattern=SHA256, description=(
        "Its sha256 digest where known: the build then starts from exactly that image."))

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
    """The image's operating system."""

    distro: Literal["ubuntu", "debian"] = Field(description="The distribution.")
    version: str = Field(description="Its release, e.g. 22.04 or 12.")

    @field_validator("version")
    @classmethod
    def _exact_version(cls, value: str) -> str:
        return check_version(value)


Provider = Literal["base", "apt", "conda", "pip", "source"]


class ForwardCompat(Strict):
    """The CUDA forward-compatibility package the image carries: the older data-center driver branches its CUDA
    runs on (each branch's minimum release, e.g. 535.86 for R535), as the image's release notes list them."""

    drivers: list[str] = Field(min_length=1, description=(
        "Each driver branch's minimum release the image's CUDA runs on, e.g. 535.86."))
    stated_in: str = Field(description="The release notes that list them, and where.")


class CudaSpec(Pin):
    """The CUDA toolkit in the image."""

    provided_by: Literal["base", "conda"] = Field(default="base", description=(
        "base: the base image has it (the build checks its CUDA_VERSION); conda: the framework's conda packages."))
    forward_compat: ForwardCompat | None = Field(default=None, description=(
        "The forward-compatibility package it carries; none: the image's CUDA needs its own minimum driver."))


class CudnnSpec(Pin):
    """cuDNN in the image."""

    provided_by: Literal["base", "apt", "conda", "pip"] = Field(default="base", description=(
        "base: the base image has it (the build checks its CUDNN_VERSION); apt: NVIDIA's libcudnnN packages at "
        "exactly `apt_version`; conda: the framework's conda packages; pip: bundled in the framework's wheel."))
    apt_version: str | None = Field(default=None, description=(
        "provided_by apt: the Debian package version, e.g. 7.4.2.24-1+cuda10.0."))

    @model_validator(mode="after")
    def _apt_version(self):
        if self.provided_by == "apt" and not self.apt_version:
            raise ValueError("apt_version: required when provided_by is apt (e.g. 7.4.2.24-1+cuda10.0)")
        return self


class NcclSpec(Pin):
    """NCCL in the image."""

    provided_by: Literal["base", "apt", "conda", "pip"] = Field(default="base", description=(
        "base: the base image has it (the build checks its NCCL_VERSION); apt: NVIDIA's packages; conda: the "
        "framework's conda packages; pip: bundled in the framework's wheel."))


class UcxSpec(Pin):
    """UCX, the communication library the image's MPI uses."""

    provided_by: Literal["base", "source", "apt"] = Field(default="source", description=(
        "base: the base image has it; source: built by the recipe (with CUDA where the MPI is CUDA-aware); apt: "
        "the distribution's packages."))


class MpiSpec(Pin):
    """The MPI in the image: what the host's launcher must agree with (the hybrid model)."""

    flavour: Literal["openmpi", "hpcx"] = Field(description="Which MPI: Open MPI, or NVIDIA HPC-X (Open MPI-based).")
    provided_by: Literal["base", "source", "apt"] = Field(default="source", description=(
        "base: the base image has it (the build runs its ompi_info); source: built by the recipe; apt: the "
        "distribution's packages."))
    prefix: str = Field(default="/usr/local/openmpi", description="Where it is installed in the image.")
    cuda_aware: bool = Field(description="Built with CUDA: MPI calls take GPU buffers.")
    pmi: list[Literal["pmix", "pmi2"]] = Field(min_length=1, description=(
        "The process-management interfaces it is built with: what the launcher (srun --mpi, ...) must offer."))
    ucx: UcxSpec | NotUsed = Field(description="The UCX it is built with.")
    verbs: bool = Field(description=(
        "Built with InfiniBand verbs (a source build adds OFED); fabrics ib and roce need verbs or UCX."))
    psm2: bool = Field(description="Built with PSM2 (Omni-Path), which fabric opa needs.")
    psm2_cuda: bool = Field(default=False, description=(
        "The PSM2 library is built with CUDA (PSM2_CUDA / PSM2_GPUDIRECT take GPU buffers)."))
    psm2_by_arch: dict[Arch, bool] = Field(default={}, description="Per-architecture `psm2` (PSM2: x86_64 only).")

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

    repo: str = Field(pattern=r"^https://[A-Za-z0-9./_-]+$", description="The repository's https URL.")
    ref: str | None = Field(default=None, description="The branch or tag the commit was taken from.")
    commit: str | None = Field(default=None, pattern=COMMIT, description=(
        "The commit built (40 hex digits); may be left out only for a release tag."))

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

    git: GitRef = Field(description="The framework's repository at the commit built.")
    bazel: Pin = Field(description="The Bazel release it is built with.")
    configure_env: dict[str, str] = Field(description=(
        "Environment for TensorFlow's ./configure (TF_NEED_CUDA, TF_CUDA_COMPUTE_CAPABILITIES, ...)."))
    configure_env_by_arch: dict[Arch, dict[str, str]] = Field(default={}, description=(
        "More of it per architecture, e.g. CC_OPT_FLAGS=-mcpu=power8."))
    packages_by_arch: dict[Arch, list[str]] = Field(default={}, description=(
        "Extra OS packages the build needs, per architecture (e.g. a JDK to bootstrap Bazel on ppc64le)."))


class FrameworkInstall(Provenance):
    """How the framework gets into the image."""

    method: Literal["base", "pip", "conda", "apt", "source"] = Field(description=(
        "base: the base image has it (the build checks its version); pip, conda, apt: installed from `packages`; "
        "source: built from `source`."))
    packages: list[str] = Field(default=[], description=(
        "The packages installed, each pinned (pip NAME==VERSION, conda NAME=VERSION, apt NAME=VERSION)."))
    channels: list[str] = Field(default=[], description="method conda: the channels, in priority order.")
    index_url: str | None = Field(default=None, description=(
        "method pip: where pip also finds wheels (--find-links), e.g. PyTorch's CUDA wheels."))
    conda: Pin | None = Field(default=None, description="method conda: the Miniconda installer's version.")
    env: dict[str, str] = Field(default={}, description=(
        "methods pip and conda: environment the installer needs (e.g. license acceptance)."))
    source: SourceBuild | None = Field(default=None, description="method source: what is built, and how.")

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
    """Horovod in the image, built against its MPI and NCCL."""

    build_env: dict[str, str] = Field(description=(
        "Build flags, e.g. HOROVOD_GPU_ALLREDUCE=NCCL, HOROVOD_WITH_TENSORFLOW=1; the build runs with exactly these."))

    @field_validator("build_env")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        return all_match(value, r"HOROVOD_[A-Z0-9_]+", "a Horovod build flag (HOROVOD_...)")


class Benchmark(GitRef):
    """Benchmark code cloned into the image at its pinned revision (e.g. tf_cnn_benchmarks)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Its name (the image's label dlrun.benchmark.NAME).")
    path: str = Field(pattern=r"^/[A-Za-z0-9_./-]+$", description="Where it is in the image.")


class NcclTests(GitRef):
    """NVIDIA's nccl-tests, built in the image against its MPI and NCCL (workloads of kind nccl-tests run them)."""

    version: str = Field(description="The release tag, e.g. v2.0.0.")
    mpi: Literal[True] = Field(default=True, description="Built with MPI=1, so that one test spans nodes.")
    path: str = Field(default="/usr/local/nccl-tests", description="Where the binaries are in the image.")

    @field_validator("version")
    @classmethod
    def _exact_version(cls, value: str) -> str:
        return check_version(value)


class Harness(Strict):
    """dlrun's own in-container harness scripts, copied from launcher/dlrun/harness at build time."""

    files: list[str] = Field(default=[], description=(
        "The harness scripts (harness_*.py) copied into `harness_dir`; the build runs each with --help."))

    @field_validator("files")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        return all_match(value, r"harness_[a-z0-9_]+\.py", "a harness script (harness_<framework>.py)")


class DebianPackage(Strict):
    """A Debian package at one version (binNMU suffixes `+bN` of other architectures are accepted)."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.+-]+$", description="The package's name.")
    version: str = Field(description="Its exact version.")

    @field_validator("version")
    @classmethod
    def _exact_version(cls, value: str) -> str:
        return check_version(value)

    def matches(self, installed: str) -> bool:
        return installed == self.version or re.fullmatch(re.escape(self.version) + r"\+b[0-9]+", installed) is not None


class Debootstrap(Provenance):
    """How the image is built without any registry: debootstrap from a Debian mirror (cpu-reference)."""

    suite: str = Field(description="The Debian release bootstrapped, e.g. bookworm.")
    variant: Literal["minbase"] = Field(default="minbase", description="debootstrap's --variant.")
    mirror: str = Field(pattern=r"^https?://[A-Za-z0-9./_-]+$", description=(
        "The Debian mirror, e.g. a snapshot that holds the pinned versions."))
    packages: list[DebianPackage] = Field(min_length=1, description=(
        "The packages installed, each at its pinned version (debootstrap --include)."))


class PinnedImageSpec(ImageSpec):
    """`containers/<tag>/image.yaml`: the single source of truth for an image's Dockerfile and Singularity
    definition per architecture. Every component key must be present; versions are exact."""

    kind: Literal["container"] = Field(default="container", description="Always container.")
    uri: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*(:[0-9]+)?(/[a-z0-9][a-z0-9._-]*)+$", description=(
        "The repository, without tag; the image for one architecture is `<uri>:<arch>`."))
    framework_version: str = Field(description="The framework's exact version.")
    base: dict[Arch, BaseImage] = Field(description="The base image of each architecture in `arch`.")
    os: OsSpec = Field(description="The operating system.")
    python_version: Pin = Field(description="The Python version in the image.")
    cuda: CudaSpec | NotUsed = Field(description="The CUDA toolkit.")
    cudnn: CudnnSpec | NotUsed = Field(description="cuDNN.")
    nccl: NcclSpec | NotUsed = Field(description="NCCL.")
    mpi: MpiSpec | NotUsed = Field(description="The MPI.")
    framework_install: FrameworkInstall = Field(description="How the framework is installed.")
    horovod: HorovodSpec | NotUsed = Field(description="Horovod.")
    benchmarks: list[Benchmark] = Field(description="Benchmark code cloned into the image.")
    nccl_tests: NcclTests | NotUsed = Field(description="NVIDIA's nccl-tests.")
    harness: Harness = Field(description="dlrun's harness scripts copied in.")
    packages: list[str] = Field(default=[], description="Further OS packages, all architectures.")
    packages_by_arch: dict[Arch, list[str]] = Field(default={}, description="OS packages of one architecture only.")
    env: dict[str, str] = Field(default={}, description="Environment variables set in the image.")
    labels: dict[str, str] = Field(default={}, description=(
        "Labels added to those dlrun writes (which record the whole stack)."))
    debootstrap: Debootstrap | None = Field(default=None, description="Build with no registry: debootstrap.")

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
