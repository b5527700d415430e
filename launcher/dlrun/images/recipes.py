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

from dlrun.catalog.stack import (CudaSpec, CudnnSpec, HorovodSpec, MpiSpec, NcclSpec, NcclTests, NotUsed,
                                 PinnedImageSpec, UcxSpec)
from dlrun.images.spec import SpecFile, spec_files

HPCCM_VERSION = "26.1.0"  # renders the nccl block for ppc64le (26.5.0 raises `Unknown CPU architecture`)
FORMATS = ("docker", "singularity")
HARNESS_SRC = "launcher/dlrun/workloads"
NVIDIA_KEY = "3bf863cc"
NVIDIA_REPO_ARCH = {"x86_64": "x86_64", "ppc64le": "ppc64el", "aarch64": "sbsa"}
DEB_TRIPLET = {"x86_64": "x86_64-linux-gnu", "ppc64le": "powerpc64le-linux-gnu", "aarch64": "aarch64-linux-gnu"}
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
    """The hpccm Stage for one architecture (hpccm's format must be set before calling)."""
    from hpccm import Stage
    from hpccm.building_blocks import conda, generic_build, nccl, ofed, openmpi, packages, pip, ucx
    from hpccm.primitives import baseimage, comment, copy, environment, label, shell
    from hpccm.templates.git import git

    import hpccm.config
    from hpccm.common import container_type

    spec = spec_file.spec
    docker = hpccm.config.g_ctype == container_type.DOCKER
    stage = Stage()
    stage += baseimage(image=spec.base_for(arch).reference, _arch=arch, _distro=_hpccm_distro(spec))
    if _needs_nvidia_fix(spec, arch):
        stage += comment("Apt sources of the base image signed with NVIDIA's revoked key")
        stage += shell(commands=[f"rm -f {STALE_NVIDIA_SOURCES}"])

    if spec.env:
        stage += environment(variables=dict(spec.env))

    # OS packages; a Debian image installs its pinned package versions (`+bN` rebuilds allowed).
    os_packages = spec.os_packages(arch)
    if spec.debootstrap is not None:
        stage += comment("Debian packages at the versions the spec pins (debootstrap builds the same set)")
        # Quoted: `*` (any `+bN` rebuild suffix) is apt's version glob, not the shell's.
        stage += packages(apt=os_packages + [f"'{p.name}={p.version}*'" for p in spec.debootstrap.packages])
    elif os_packages:
        stage += packages(ospackages=os_packages)

    nvidia_key = f"{_nvidia_repo(spec, arch)}/{NVIDIA_KEY}.pub"
    signed = f"deb [signed-by=/usr/share/keyrings/{NVIDIA_KEY}.gpg]"
    if isinstance(spec.cudnn, CudnnSpec) and spec.cudnn.provided_by == "apt":
        major = spec.cudnn.version.split(".")[0]
        stage += comment(f"cuDNN {spec.cudnn.version}")
        stage += packages(
            apt=[f"libcudnn{major}={spec.cudnn.apt_version}", f"libcudnn{major}-dev={spec.cudnn.apt_version}"],
            apt_keys=[nvidia_key],
            apt_repositories=[f"{signed} {_nvidia_repo(spec, arch)} /",
                              f"{signed} {_nvidia_repo(spec, arch, 'machine-learning')} /"])
    if isinstance(spec.nccl, NcclSpec) and spec.nccl.provided_by == "apt":
        cuda = spec.cuda.version if isinstance(spec.cuda, CudaSpec) else ""
        version = spec.nccl.version if "-" in spec.nccl.version else f"{spec.nccl.version}-1"
        stage += nccl(cuda=".".join(cuda.split(".")[:2]), version=version)

    mpi = spec.mpi
    if isinstance(mpi, MpiSpec) and mpi.provided_by == "source":
        ucx_prefix: str | bool = False
        if mpi.verbs:
            stage += ofed()
        if isinstance(mpi.ucx, UcxSpec) and mpi.ucx.provided_by == "source":
            ucx_prefix = "/usr/local/ucx"
            stage += ucx(version=mpi.ucx.version, cuda=mpi.cuda_aware, ofed=mpi.verbs, knem=False, xpmem=False,
                         gdrcopy=False, prefix=ucx_prefix)
        opts = ["--disable-getpwuid", "--enable-orterun-prefix-by-default", "--with-slurm"]
        if mpi.psm2_for(arch):
            opts.append("--with-psm2")
        stage += openmpi(version=mpi.version, cuda=mpi.cuda_aware, infiniband=mpi.verbs, ucx=ucx_prefix,
                         pmix="internal" if "pmix" in mpi.pmi else False, prefix=mpi.prefix, configure_opts=opts)

    install = spec.framework_install
    pip_cmd = f"{spec.python} -m pip"
    if install.method == "pip":
        args = ["--no-cache-dir"] + ([f"--find-links {install.index_url}"] if install.index_url else [])
        if install.env:
            stage += environment(variables=install.env)
        stage += pip(packages=install.packages, pip=pip_cmd, ospackages=[], args=args)
    elif install.method == "conda":
        if install.env:
            stage += environment(variables=install.env)
        stage += conda(channels=install.channels, packages=install.packages, eula=True,
                       version=install.conda.version, prefix="/usr/local/anaconda")
        stage += environment(variables={"PATH": "/usr/local/anaconda/bin:$PATH"})
    elif install.method == "apt" and spec.debootstrap is None:
        stage += packages(apt=install.packages)
    elif install.method == "source":
        stage += _tensorflow_from_source(spec, arch, pip_cmd)

    if isinstance(spec.horovod, HorovodSpec):
        flags = " ".join(f"{k}={v}" for k, v in sorted(spec.horovod.build_env.items()))
        stage += comment(f"Horovod {spec.horovod.version}, built against the image's MPI and NCCL")
        stage += shell(commands=[
            "ldconfig /usr/local/cuda/lib64/stubs",  # no GPU driver at build time: link the CUDA stub
            f"{flags} {pip_cmd} install --no-cache-dir horovod=={spec.horovod.version}",
            "ldconfig"])

    for bench in spec.benchmarks:
        stage += comment(f"{bench.name}: {bench.repo} at {bench.revision}")
        stage += shell(commands=[_clone(git(), bench, bench.path)])

    tests = spec.nccl_tests
    if isinstance(tests, NcclTests) and isinstance(mpi, MpiSpec):
        nccl_home = {"conda": "/usr/local/anaconda"}.get(getattr(spec.nccl, "provided_by", ""), "/usr")
        make = (f"make -j$(nproc) MPI=1 MPI_HOME={mpi.prefix} CUDA_HOME=/usr/local/cuda NCCL_HOME={nccl_home}")
        stage += generic_build(repository=tests.repo, commit=tests.commit, branch=None if tests.commit else tests.ref,
                               build=[make], install=[f"mkdir -p {tests.path}", f"cp -a build/* {tests.path}/"])
        stage += environment(variables={"PATH": f"{tests.path}:$PATH"})

    if spec.harness.files:
        stage += comment("dlrun harness (build from the repository root)")
        srcs = [f"{HARNESS_SRC}/{name}" for name in spec.harness.files]
        stage += copy(src=srcs if len(srcs) > 1 else srcs[0],
                      dest=f"{spec.harness_dir}/" if len(srcs) > 1 else f"{spec.harness_dir}/{spec.harness.files[0]}")
    # Mount points: the dataset (read-only at /data) and the harness directory must exist for Charliecloud.
    stage += shell(commands=[f"mkdir -p /data {spec.harness_dir}"])

    checks = check_commands(spec)
    if checks:
        stage += comment("Check that the image holds what the spec pins")
        stage += shell(commands=checks)

    values = labels(spec_file, arch)
    stage += label(metadata={k: json.dumps(v) if docker else v for k, v in values.items()})
    return stage


def _clone(template, ref, path: str) -> str:
    import posixpath

    return template.clone_step(repository=ref.repo, branch=None if ref.commit else ref.ref, commit=ref.commit,
                               path=posixpath.dirname(path), directory=posixpath.basename(path))


def _tensorflow_from_source(spec: PinnedImageSpec, arch: str, pip_cmd: str):
    """TensorFlow with Bazel, as Han et al. built it for POWER (Bazel has no ppc64le release binary)."""
    from hpccm import building_blocks as bb, primitives as pr
    from hpccm.building_blocks.base import bb_base
    from hpccm.templates.git import git

    source = spec.framework_install.source
    assert source is not None
    bazel = source.bazel.version
    block = bb_base()
    extra = source.packages_by_arch.get(arch, [])  # type: ignore[call-overload]
    if extra:
        block += bb.packages(ospackages=extra)
    releases = f"https://github.com/bazelbuild/bazel/releases/download/{bazel}"
    if arch == "x86_64":
        install_bazel = [f"wget -q -O /var/tmp/bazel-installer.sh {releases}/bazel-{bazel}-installer-linux-x86_64.sh",
                         "bash /var/tmp/bazel-installer.sh", "rm -f /var/tmp/bazel-installer.sh"]
    else:
        install_bazel = ["mkdir -p /var/tmp/bazel", "cd /var/tmp/bazel",
                         f"wget -q {releases}/bazel-{bazel}-dist.zip", f"unzip -q bazel-{bazel}-dist.zip",
                         "bash ./compile.sh", "cp output/bazel /usr/local/bin/bazel", "cd /", "rm -rf /var/tmp/bazel"]
    block += pr.comment(f"Bazel {bazel}")
    block += pr.shell(commands=install_bazel)
    if spec.framework_install.packages:
        block += bb.pip(packages=spec.framework_install.packages, pip=pip_cmd, ospackages=[])
    env = {**source.configure_env, **source.configure_env_by_arch.get(arch, {}),  # type: ignore[call-overload]
           "CUDNN_INSTALL_PATH": f"/usr/lib/{DEB_TRIPLET[arch]}"}
    stubs = "/usr/local/cuda/lib64/stubs"
    block += pr.comment(f"TensorFlow {spec.framework_version} from source ({source.git.revision})")
    block += pr.shell(commands=[
        _clone(git(), source.git, "/var/tmp/tensorflow"),
        "cd /var/tmp/tensorflow",
        *[f"export {k}='{v}'" for k, v in sorted(env.items())],
        f"ln -sf {stubs}/libcuda.so {stubs}/libcuda.so.1",
        "yes '' | ./configure",
        f"LD_LIBRARY_PATH={stubs}:$LD_LIBRARY_PATH bazel build --config=opt --config=cuda "
        "//tensorflow/tools/pip_package:build_pip_package",
        "bazel-bin/tensorflow/tools/pip_package/build_pip_package /var/tmp/tensorflow_pkg",
        f"{pip_cmd} install --no-cache-dir /var/tmp/tensorflow_pkg/tensorflow-{spec.framework_version}-*.whl",
        f"rm -f {stubs}/libcuda.so.1", "cd /", "rm -rf /var/tmp/tensorflow /var/tmp/tensorflow_pkg /root/.cache/bazel"])
    return block


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
