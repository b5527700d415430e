"""Recipe steps that build from source: benchmarks cloned at their pinned revisions, nccl-tests built against the
image's MPI and NCCL, and TensorFlow built with Bazel (dlrun.images.recipes puts them in the stage)."""
from __future__ import annotations

from dlrun.catalog.stack import MpiSpec, NcclTests, PinnedImageSpec

DEB_TRIPLET = {"x86_64": "x86_64-linux-gnu", "ppc64le": "powerpc64le-linux-gnu", "aarch64": "aarch64-linux-gnu"}


def source_steps(spec: PinnedImageSpec, arch: str) -> list:
    """Benchmarks cloned at their pinned revisions, and nccl-tests built against the image's MPI and NCCL."""
    from hpccm.building_blocks import generic_build
    from hpccm.primitives import comment, environment, shell
    from hpccm.templates.git import git

    steps: list = []
    for bench in spec.benchmarks:
        steps += [comment(f"{bench.name}: {bench.repo} at {bench.revision}"),
                  shell(commands=[_clone(git(), bench, bench.path)])]
    tests, mpi = spec.nccl_tests, spec.mpi
    if isinstance(tests, NcclTests) and isinstance(mpi, MpiSpec):
        nccl_home = {"conda": "/usr/local/anaconda"}.get(getattr(spec.nccl, "provided_by", ""), "/usr")
        make = (f"make -j$(nproc) MPI=1 MPI_HOME={mpi.prefix} CUDA_HOME=/usr/local/cuda NCCL_HOME={nccl_home}")
        steps += [generic_build(repository=tests.repo, commit=tests.commit, branch=None if tests.commit else tests.ref,
                                build=[make], install=[f"mkdir -p {tests.path}", f"cp -a build/* {tests.path}/"]),
                  environment(variables={"PATH": f"{tests.path}:$PATH"})]
    return steps


def _clone(template, ref, path: str) -> str:
    import posixpath

    return template.clone_step(repository=ref.repo, branch=None if ref.commit else ref.ref, commit=ref.commit,
                               path=posixpath.dirname(path), directory=posixpath.basename(path))


def tensorflow_from_source(spec: PinnedImageSpec, arch: str, pip_cmd: str):
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
