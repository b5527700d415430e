"""Render an image spec into a Dockerfile and a Singularity definition per architecture, with hpccm.

One function builds the hpccm Stage from the spec; hpccm writes both formats from it, so the two can
only differ where the formats do. hpccm keeps its target (format, architecture, distribution) in module
globals, so every render sets all of them first. Shell steps that no hpccm building block covers
(Horovod's build, TensorFlow from source, the version checks) use hpccm's `shell` primitive.
"""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path

from dlrun.catalog.stack import (CudaSpec, CudnnSpec, HorovodSpec, MpiSpec, NcclSpec, NotUsed,
                                 PinnedImageSpec, UcxSpec)
from dlrun.images.source_builds import source_steps, tensorflow_from_source
from dlrun.images.spec import SpecFile, spec_files

HPCCM_VERSION = "26.1.0"  # renders the nccl block for ppc64le (26.5.0 raises `Unknown CPU architecture`)
FORMATS = ("docker", "singularity")
HARNESS_SRC = "launcher/dlrun/harness"
NVIDIA_KEY = "3bf863cc"
NVIDIA_REPO_ARCH = {"x86_64": "x86_64", "ppc64le": "ppc64el", "aarch64": "sbsa"}
# Old NVIDIA images list apt sources signed with the key NVIDIA revoked in 2022: `apt-get update` fails
# on them, so they are removed before the first package install (the steps that need NVIDIA's
# repository add it back with the current key).
STALE_NVIDIA_SOURCES = "/etc/apt/sources.list.d/cuda.list /etc/apt/sources.list.d/nvidia-ml.list"


def recipe_name(arch: str, fmt: str) -> str:
    return f"Dockerfile.{arch}" if fmt == "docker" else f"Singularity.{arch}.def"


def _hpccm_distro(spec: PinnedImageSpec) -> str:
    if spec.os.distro == "ubuntu":
        return "ubuntu" + spec.os.version.split(".")[0]
    # hpccm knows no Debian; its apt-based Ubuntu steps are what Debian needs too.
    return "ubuntu22"


def _nvidia_repo(spec: PinnedImageSpec, arch: str, kind: str = "cuda") -> str:
    label = "ubuntu" + spec.os.version.replace(".", "")
    return f"https://developer.download.nvidia.com/compute/{kind}/repos/{label}/{NVIDIA_REPO_ARCH[arch]}"


def _needs_nvidia_fix(spec: PinnedImageSpec, arch: str) -> bool:
    base = spec.base_for(arch)
    old_cuda = isinstance(spec.cuda, CudaSpec) and int(spec.cuda.version.split(".")[0]) < 11
    return base.image.startswith(("nvidia/cuda", "nvcr.io/nvidia/")) and old_cuda


def labels(spec_file: SpecFile, arch: str) -> dict[str, str]:
    """Labels recording the whole pinned stack, so `docker inspect` of any copy tells what it is."""
    spec = spec_file.spec

    def component(value, text) -> str:
        return f"not used ({value.not_used})" if isinstance(value, NotUsed) else text(value)

    out = {
        "org.opencontainers.image.title": spec.name,
        "org.opencontainers.image.description": spec.description,
        "dlrun.image": spec.name,
        "dlrun.arch": arch,
        "dlrun.spec": spec_file.display_path,
        "dlrun.spec-sha256": spec_file.sha256,
        "dlrun.base": spec.base_for(arch).reference,
        "dlrun.os": f"{spec.os.distro} {spec.os.version}",
        "dlrun.python": spec.python_version.version,
        "dlrun.cuda": component(spec.cuda, lambda c: f"{c.version} ({c.provided_by})"),
        "dlrun.cudnn": component(spec.cudnn, lambda c: f"{c.version} ({c.provided_by})"),
        "dlrun.nccl": component(spec.nccl, lambda c: f"{c.version} ({c.provided_by})"),
        "dlrun.mpi": component(spec.mpi, lambda m: m.describe(arch)),
        "dlrun.framework": f"{spec.framework} {spec.framework_version} ({spec.framework_install.method})",
        "dlrun.horovod": component(spec.horovod, lambda h: " ".join(
            [h.version] + [f"{k}={v}" for k, v in sorted(h.build_env.items())])),
        "dlrun.nccl-tests": component(spec.nccl_tests, lambda t: f"{t.version} {t.revision} MPI=1"),
        "dlrun.harness": " ".join(f"{spec.harness_dir}/{f}" for f in spec.harness.files) or "none",
    }
    for bench in spec.benchmarks:
        out[f"dlrun.benchmark.{bench.name}"] = f"{bench.repo} {bench.revision}" + (f" ({bench.ref})" if bench.ref else "")
    out.update(spec.labels)
    return out


def _prefix_check(variable: str, version: str, what: str) -> str:
    return (f'case "${{{variable}:-}}" in {version}|{version}[.-]*) ;; '
            f'*) echo "{what}: the base image declares {variable}=${{{variable}:-unset}}, the spec pins {version}" >&2; '
            f'exit 1 ;; esac')


def _framework_check(spec: PinnedImageSpec) -> str:
    module = {"pytorch": "torch", "tensorflow": "tensorflow"}[spec.framework]
    version = spec.framework_version
    return (f"{spec.python} -c 'import sys, {module} as m; v = m.__version__.split(\"+\")[0]; "
            f"sys.exit(0 if v == \"{version}\" else \"{module} \" + v + \", the spec pins {version}\")'")


def check_commands(spec: PinnedImageSpec) -> list[str]:
    """Commands that fail the build when the image does not hold what the spec says the base provides."""
    checks = []
    for value, variable, what in ((spec.cuda, "CUDA_VERSION", "CUDA"), (spec.cudnn, "CUDNN_VERSION", "cuDNN"),
                                  (spec.nccl, "NCCL_VERSION", "NCCL")):
        if isinstance(value, (CudaSpec, CudnnSpec, NcclSpec)) and value.provided_by == "base":
            checks.append(_prefix_check(variable, value.version, what))
    if spec.framework_install.method == "base":
        checks.append(_framework_check(spec))
    if isinstance(spec.mpi, MpiSpec) and spec.mpi.provided_by == "base":
        checks.append(f"{spec.mpi.prefix}/bin/ompi_info --version")
    for name in spec.harness.files:
        checks.append(f"{spec.python} {spec.harness_dir}/{name} --help > /dev/null")
    return checks


def build_stage(spec_file: SpecFile, arch: str):
    """The hpccm Stage for one architecture (hpccm's format must be set before calling): the recipe's steps in
    order, each a function of the spec that adds nothing when the spec does not ask for it."""
    from hpccm import Stage

    stage = Stage()
    spec = spec_file.spec
    for step in (_base_steps, _os_package_steps, _cuda_library_steps, _mpi_steps, _framework_steps,
                 _horovod_steps, source_steps, _harness_steps):
        for item in step(spec, arch):
            stage += item
    for item in _check_and_label_steps(spec_file, arch):
        stage += item
    return stage


def _base_steps(spec: PinnedImageSpec, arch: str) -> list:
    from hpccm.primitives import baseimage, comment, environment, shell

    steps = [baseimage(image=spec.base_for(arch).reference, _arch=arch, _distro=_hpccm_distro(spec))]
    if _needs_nvidia_fix(spec, arch):
        steps += [comment("Apt sources of the base image signed with NVIDIA's revoked key"),
                  shell(commands=[f"rm -f {STALE_NVIDIA_SOURCES}"])]
    if spec.env:
        steps.append(environment(variables=dict(spec.env)))
    return steps


def _os_package_steps(spec: PinnedImageSpec, arch: str) -> list:
    """OS packages; a Debian image installs its pinned package versions (`+bN` rebuilds allowed)."""
    from hpccm.building_blocks import packages
    from hpccm.primitives import comment

    os_packages = spec.os_packages(arch)
    if spec.debootstrap is not None:
        # Quoted: `*` (any `+bN` rebuild suffix) is apt's version glob, not the shell's.
        return [comment("Debian packages at the versions the spec pins (debootstrap builds the same set)"),
                packages(apt=os_packages + [f"'{p.name}={p.version}*'" for p in spec.debootstrap.packages])]
    return [packages(ospackages=os_packages)] if os_packages else []


def _cuda_library_steps(spec: PinnedImageSpec, arch: str) -> list:
    from hpccm.building_blocks import nccl, packages
    from hpccm.primitives import comment

    steps: list = []
    if isinstance(spec.cudnn, CudnnSpec) and spec.cudnn.provided_by == "apt":
        nvidia_key = f"{_nvidia_repo(spec, arch)}/{NVIDIA_KEY}.pub"
        signed = f"deb [signed-by=/usr/share/keyrings/{NVIDIA_KEY}.gpg]"
        major = spec.cudnn.version.split(".")[0]
        steps += [comment(f"cuDNN {spec.cudnn.version}"), packages(
            apt=[f"libcudnn{major}={spec.cudnn.apt_version}", f"libcudnn{major}-dev={spec.cudnn.apt_version}"],
            apt_keys=[nvidia_key],
            apt_repositories=[f"{signed} {_nvidia_repo(spec, arch)} /",
                              f"{signed} {_nvidia_repo(spec, arch, 'machine-learning')} /"])]
    if isinstance(spec.nccl, NcclSpec) and spec.nccl.provided_by == "apt":
        cuda = spec.cuda.version if isinstance(spec.cuda, CudaSpec) else ""
        version = spec.nccl.version if "-" in spec.nccl.version else f"{spec.nccl.version}-1"
        steps.append(nccl(cuda=".".join(cuda.split(".")[:2]), version=version))
    return steps


def _mpi_steps(spec: PinnedImageSpec, arch: str) -> list:
    from hpccm.building_blocks import ofed, openmpi, ucx

    mpi = spec.mpi
    if not (isinstance(mpi, MpiSpec) and mpi.provided_by == "source"):
        return []
    steps: list = [ofed()] if mpi.verbs else []
    ucx_prefix: str | bool = False
    if isinstance(mpi.ucx, UcxSpec) and mpi.ucx.provided_by == "source":
        ucx_prefix = "/usr/local/ucx"
        steps.append(ucx(version=mpi.ucx.version, cuda=mpi.cuda_aware, ofed=mpi.verbs, knem=False, xpmem=False,
                         gdrcopy=False, prefix=ucx_prefix))
    opts = ["--disable-getpwuid", "--enable-orterun-prefix-by-default", "--with-slurm"]
    if mpi.psm2_for(arch):
        opts.append("--with-psm2")
    steps.append(openmpi(version=mpi.version, cuda=mpi.cuda_aware, infiniband=mpi.verbs, ucx=ucx_prefix,
                         pmix="internal" if "pmix" in mpi.pmi else False, prefix=mpi.prefix, configure_opts=opts))
    return steps


def _framework_steps(spec: PinnedImageSpec, arch: str) -> list:
    from hpccm.building_blocks import conda, packages, pip
    from hpccm.primitives import environment

    install = spec.framework_install
    pip_cmd = f"{spec.python} -m pip"
    env = [environment(variables=install.env)] if install.env and install.method in ("pip", "conda") else []
    if install.method == "pip":
        args = ["--no-cache-dir"] + ([f"--find-links {install.index_url}"] if install.index_url else [])
        return env + [pip(packages=install.packages, pip=pip_cmd, ospackages=[], args=args)]
    if install.method == "conda":
        return env + [conda(channels=install.channels, packages=install.packages, eula=True,
                            version=install.conda.version, prefix="/usr/local/anaconda"),
                      environment(variables={"PATH": "/usr/local/anaconda/bin:$PATH"})]
    if install.method == "apt" and spec.debootstrap is None:
        return [packages(apt=install.packages)]
    if install.method == "source":
        return [tensorflow_from_source(spec, arch, pip_cmd)]
    return []


def _horovod_steps(spec: PinnedImageSpec, arch: str) -> list:
    from hpccm.primitives import comment, shell

    if not isinstance(spec.horovod, HorovodSpec):
        return []
    flags = " ".join(f"{k}={v}" for k, v in sorted(spec.horovod.build_env.items()))
    return [comment(f"Horovod {spec.horovod.version}, built against the image's MPI and NCCL"),
            shell(commands=[
                "ldconfig /usr/local/cuda/lib64/stubs",  # no GPU driver at build time: link the CUDA stub
                f"{flags} {spec.python} -m pip install --no-cache-dir horovod=={spec.horovod.version}",
                "ldconfig"])]


def _harness_steps(spec: PinnedImageSpec, arch: str) -> list:
    from hpccm.primitives import comment, copy, shell

    steps: list = []
    if spec.harness.files:
        srcs = [f"{HARNESS_SRC}/{name}" for name in spec.harness.files]
        steps += [comment("dlrun harness (build from the repository root)"),
                  copy(src=srcs if len(srcs) > 1 else srcs[0],
                       dest=f"{spec.harness_dir}/" if len(srcs) > 1 else f"{spec.harness_dir}/{spec.harness.files[0]}")]
    # Mount points: the dataset (read-only at /data) and the harness directory must exist for Charliecloud.
    return steps + [shell(commands=[f"mkdir -p /data {spec.harness_dir}"])]


def _check_and_label_steps(spec_file: SpecFile, arch: str) -> list:
    from hpccm.primitives import comment, label, shell

    import hpccm.config
    from hpccm.common import container_type

    checks = check_commands(spec_file.spec)
    steps: list = [comment("Check that the image holds what the spec pins"), shell(commands=checks)] if checks else []
    docker = hpccm.config.g_ctype == container_type.DOCKER
    values = labels(spec_file, arch)
    return steps + [label(metadata={k: json.dumps(v) if docker else v for k, v in values.items()})]


def header(spec_file: SpecFile, arch: str, fmt: str) -> str:
    name = spec_file.spec.name
    recipe = f"containers/{name}/{recipe_name(arch, fmt)}"
    ref = spec_file.spec.reference(arch)
    build = (f"docker build -f {recipe} -t {ref} ." if fmt == "docker"
             else f"singularity build {name}.sif {recipe}")
    lines = [
        f"GENERATED by dlrun from {spec_file.display_path} for {arch} with hpccm {HPCCM_VERSION}. DO NOT EDIT:",
        "change the spec, then run `dlrun images render` (CI runs `dlrun images render --check`).",
        f"Build from the repository root: {build}",
    ]
    return "".join(f"# {line}\n" for line in lines)


def render_recipe(spec_file: SpecFile, arch: str, fmt: str) -> str:
    try:
        import hpccm
        import hpccm.config
    except ImportError:
        from dlrun.errors import DlrunError

        raise DlrunError(f"hpccm is not installed; pip install 'dlrun[images]' (hpccm=={HPCCM_VERSION})") from None
    if hpccm.__version__ != HPCCM_VERSION:
        from dlrun.errors import DlrunError

        raise DlrunError(f"hpccm {hpccm.__version__} is installed, but the recipes are rendered with "
                         f"{HPCCM_VERSION}: pip install 'hpccm=={HPCCM_VERSION}'")

    if arch not in spec_file.spec.arch:
        from dlrun.errors import UsageError

        raise UsageError(f"image {spec_file.spec.name!r} is built for {', '.join(spec_file.spec.arch)}, not {arch}")
    hpccm.config.set_container_format(fmt)
    hpccm.config.set_singularity_version("3.2")
    hpccm.config.set_cpu_target(None)
    hpccm.config.set_working_directory("/var/tmp")
    stage = build_stage(spec_file, arch)
    text = str(stage).rstrip("\n") + "\n"
    return header(spec_file, arch, fmt) + text


def recipe_texts(spec_file: SpecFile) -> dict[Path, str]:
    return {spec_file.folder / recipe_name(arch, fmt): render_recipe(spec_file, arch, fmt)
            for arch in spec_file.spec.arch for fmt in FORMATS}


@dataclass
class Drift:
    path: Path
    diff: str  # unified diff, committed -> rendered ("" when the file is missing)
    missing: bool = False


def render_all(names: list[str] | None = None, *, check: bool = False) -> tuple[list[Path], list[Drift]]:
    """Render every spec (or `names`); write the files unless `check`. Returns (written, drifted)."""
    from dlrun.files import write_atomic

    files = spec_files()
    if names:
        from dlrun.errors import unknown_name

        for name in names:
            if name not in files:
                raise unknown_name("image", name, files)
        files = {name: files[name] for name in names}
    written: list[Path] = []
    drifted: list[Drift] = []
    for spec_file in files.values():
        expected = recipe_texts(spec_file)
        # A recipe for an architecture the spec no longer has is drift too.
        stale = {p for p in spec_file.folder.glob("Dockerfile.*")} | set(spec_file.folder.glob("Singularity.*.def"))
        for path in sorted(stale - set(expected)):
            drifted.append(Drift(path, f"{path.name}: no longer generated from {spec_file.display_path}\n"))
            if not check:
                path.unlink()
        for path, text in expected.items():
            current = path.read_text() if path.exists() else None
            if current == text:
                continue
            diff = "".join(difflib.unified_diff((current or "").splitlines(True), text.splitlines(True),
                                                f"{path} (committed)", f"{path} (rendered from spec)"))
            drifted.append(Drift(path, diff, missing=current is None))
            if not check:
                write_atomic(path, text)
                written.append(path)
    return written, drifted
