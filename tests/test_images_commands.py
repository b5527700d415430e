"""`dlrun images` commands without real images: exact --dry-run commands per engine, clear errors for
missing runtimes, bad input, the lock file, digests and Docker archives, and the runtimes' exact
container commands."""
from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest
import yaml

from conftest import REPO, run_cli

SOCK = "unix:///tmp/dlrun-test-nonexistent.sock"


@pytest.fixture
def image_home(tmp_path, monkeypatch, dlrun_home):
    """A private image store, cache and lock; a Docker endpoint that does not exist; PATH without runtimes."""
    env = {"DLRUN_IMAGES_DIR": str(tmp_path / "store"), "DLRUN_CACHE_DIR": str(tmp_path / "cache"),
           "DLRUN_IMAGES_LOCK": str(tmp_path / "images.lock"), "DOCKER_HOST": SOCK, "DLRUN_HOME": str(dlrun_home)}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return {"env": env, "store": tmp_path / "store", "cache": tmp_path / "cache", "lock": tmp_path / "images.lock",
            "tmp": tmp_path}


def dry(*args: str, env: dict) -> list[str]:
    proc = run_cli("images", *args, "--dry-run", env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


# ------------------------------------------------------------------------------------------------ dry runs
def test_build_dry_run_commands(image_home):
    env, store = image_home["env"], image_home["store"]
    api = f"    # via the Docker API at {SOCK} (docker-py)"
    assert dry("build", "tf1.14-nccl", env=env) == [
        f"docker build -f containers/tf1.14-nccl/Dockerfile.x86_64 -t localhost/dlrun/tf1.14-nccl:x86_64 "
        f"--platform linux/amd64 {REPO}" + api]
    assert dry("build", "tf1.8-cuda9", "--arch", "ppc64le", "--engine", "podman", env=env) == [
        f"podman build -f containers/tf1.8-cuda9/Dockerfile.ppc64le -t localhost/dlrun/tf1.8-cuda9:ppc64le "
        f"--platform linux/ppc64le {REPO}" + api]
    sif = store / "tf1.14-nccl" / "x86_64" / "tf1.14-nccl.sif"
    fakeroot = [] if os.geteuid() == 0 else ["--fakeroot"]
    for engine in ("singularity", "apptainer"):
        assert dry("build", "tf1.14-nccl", "--engine", engine, env=env) == [
            f"mkdir -p {sif.parent}",
            f"cd {REPO} && {engine} build {' '.join(fakeroot + [str(sif)])} containers/tf1.14-nccl/Singularity.x86_64.def"]
    lines = dry("build", "pytorch1.0-horovod", "--engine", "charliecloud", env=env)
    assert lines == [f"cd {REPO} && ch-image build -t dlrun/pytorch1.0-horovod:x86_64 -f "
                     "containers/pytorch1.0-horovod/Dockerfile.x86_64 .",
                     f"ch-convert -i ch-image -o dir dlrun/pytorch1.0-horovod:x86_64 "
                     f"{store}/pytorch1.0-horovod/x86_64/rootfs"]


def test_debootstrap_dry_run(image_home):
    lines = dry("build", "cpu-reference", "--engine", "charliecloud", "--arch", "x86_64", env=image_home["env"])
    base = next((image_home["cache"] / "debootstrap").glob("*"), None) if (image_home["cache"] / "debootstrap").exists() else None
    assert base is None  # a dry run creates nothing
    assert lines[0].startswith("debootstrap --variant=minbase --arch=amd64 "
                               "--include=libtcmalloc-minimal4,openmpi-bin,python3,python3-numpy,python3-torch bookworm "
                               f"{image_home['cache']}/debootstrap/bookworm-x86_64-")
    assert lines[0].split("    #")[0].endswith("/rootfs.tmp http://deb.debian.org/debian")
    assert lines[1].startswith("tar --sort=name --format=posix --numeric-owner --owner=0 --group=0 ")
    assert lines[2].startswith("cp -al ") and lines[2].endswith(f"{image_home['store']}/cpu-reference/x86_64/rootfs.tmp")
    assert lines[3].startswith("# dlrun's layer") and lines[4].startswith("# write ")
    assert dry("build", "cpu-reference", "--engine", "debootstrap", "--arch", "x86_64", env=image_home["env"]) == lines
    proc = run_cli("images", "build", "tf1.14-nccl", "--engine", "debootstrap", "--dry-run", env=image_home["env"])
    assert proc.returncode == 2 and "has no `debootstrap:` section" in proc.stderr


def test_pull_push_save_load_dry_run_commands(image_home, tmp_path):
    env, store = image_home["env"], image_home["store"]
    api = f"    # via the Docker API at {SOCK} (docker-py)"
    ref = "localhost/dlrun/pytorch2.6-ngc24.12:aarch64"
    common = ["pytorch2.6-ngc24.12", "--arch", "aarch64"]
    assert dry("pull", *common, "--from", "registry.example.org/dlrun/pt:aarch64", env=env) == [
        "docker pull --platform linux/arm64 registry.example.org/dlrun/pt:aarch64" + api,
        f"docker tag registry.example.org/dlrun/pt:aarch64 {ref}" + api]
    assert dry("push", *common, "--to", "registry.example.org/dlrun/pt:aarch64", "--engine", "podman", env=env) == [
        f"podman tag {ref} registry.example.org/dlrun/pt:aarch64" + api,
        "podman push registry.example.org/dlrun/pt:aarch64" + api]
    assert dry("save", *common, "-o", "pt.tar", env=env) == [f"docker save -o pt.tar {ref}" + api]
    assert dry("load", "pt.tar", "pytorch2.6-ngc24.12", "--arch", "aarch64", env=env) == [
        "docker load -i pt.tar" + api, f"docker tag '<loaded image>' {ref}" + api]
    sif = store / "pytorch2.6-ngc24.12" / "aarch64" / "pytorch2.6-ngc24.12.sif"
    for engine in ("singularity", "apptainer"):
        assert dry("pull", *common, "--from", "registry.example.org/dlrun/pt:aarch64", "--engine", engine, env=env) == [
            f"mkdir -p {sif.parent}", f"{engine} pull --force {sif} docker://registry.example.org/dlrun/pt:aarch64"]
        assert dry("push", *common, "--to", "oras://registry.example.org/dlrun/pt:sif", "--engine", engine,
                   env=env) == [f"{engine} push {sif} oras://registry.example.org/dlrun/pt:sif"]
        assert dry("save", *common, "-o", "pt.sif", "--engine", engine, env=env) == [f"cp {sif} pt.sif"]
        assert dry("load", "pt.sif", "pytorch2.6-ngc24.12", "--arch", "aarch64", "--engine", engine, env=env) == [
            f"mkdir -p {sif.parent}", f"cp pt.sif {sif}"]
    rootfs = store / "cpu-reference" / "x86_64" / "rootfs"
    assert dry("save", "cpu-reference", "--arch", "x86_64", "--engine", "charliecloud", env=env) == [
        f"cp {store}/cpu-reference/x86_64/image.tar cpu-reference_x86_64.tar"]
    assert dry("load", "cpu.tar", "cpu-reference", "--arch", "x86_64", "--engine", "charliecloud", env=env) == [
        f"# unpack cpu.tar layer by layer (digests checked first) into {rootfs}",
        f"cp cpu.tar {store}/cpu-reference/x86_64/image.tar"]


# ------------------------------------------------------------------------------------------------ missing runtimes
@pytest.mark.parametrize("engine,hint", [("singularity", "install SingularityCE"), ("apptainer", "install Apptainer")])
def test_missing_runtime_says_what_to_install(image_home, engine, hint, tmp_path):
    env = {**image_home["env"], "PATH": f"{tmp_path}/empty-bin:/usr/bin:/bin"}
    proc = run_cli("images", "build", "cpu-reference", "--arch", "x86_64", "--engine", engine, env=env)
    assert proc.returncode == 1
    assert f"{engine} is not installed (not on PATH)" in proc.stderr and hint in proc.stderr
    assert "--dry-run" in proc.stderr


def test_unreachable_docker_api_says_how_to_start_one(image_home):
    proc = run_cli("images", "build", "tf1.14-nccl", env=image_home["env"])
    assert proc.returncode == 1
    assert f"cannot reach the Docker API at {SOCK}" in proc.stderr
    proc = run_cli("images", "verify", "cpu-reference", "--arch", "x86_64", "--engine", "podman", "--host",
                   "unix:///tmp/dlrun-no-podman.sock", env=image_home["env"])
    assert proc.returncode == 1
    assert "podman system service --time=0 unix:///tmp/dlrun-no-podman.sock" in proc.stderr


def test_debootstrap_is_only_for_debian_specs(image_home):
    from dlrun.errors import DlrunError
    from dlrun.images import debootstrap
    from dlrun.images.spec import get_spec

    with pytest.raises(DlrunError, match="no `debootstrap:` section"):
        debootstrap.build(get_spec("tf1.14-nccl"), "x86_64", print)


# ------------------------------------------------------------------------------------------------ bad input
def test_unknown_image_suggests_the_closest(image_home):
    for args in (("show", "tf1.41-nccl"), ("build", "tf1.41-nccl", "--dry-run"), ("verify", "tf1.41-nccl")):
        proc = run_cli("images", *args, env=image_home["env"])
        assert proc.returncode == 2, args
        assert "unknown image 'tf1.41-nccl'; did you mean 'tf1.14-nccl'?" in proc.stderr


def test_unknown_engine_and_architecture(image_home):
    proc = run_cli("images", "build", "cpu-reference", "--engine", "dokcer", "--dry-run", env=image_home["env"])
    assert proc.returncode == 2 and "did you mean 'docker'?" in proc.stderr
    proc = run_cli("images", "build", "cpu-reference", "--arch", "ppc64", "--dry-run", env=image_home["env"])
    assert proc.returncode == 2 and "did you mean 'ppc64le'?" in proc.stderr


def test_architecture_the_image_does_not_support(image_home, tmp_path):
    proc = run_cli("images", "build", "powerai1.6", "--arch", "x86_64", "--dry-run", env=image_home["env"])
    assert proc.returncode == 2
    assert "image 'powerai1.6' is built for ppc64le, not x86_64" in proc.stderr
    # ... and for the chosen system: the error names both the image and the system
    (tmp_path / "site" / "systems").mkdir(parents=True)
    (tmp_path / "site" / "systems" / "p9.yaml").write_text(
        "name: p9\ndescription: a POWER9 node\narch: ppc64le\nnodes: 1\ncpu: {cores_per_socket: 20}\nmemory_gb: 256\n")
    env = {**image_home["env"], "DLRUN_PATH": str(tmp_path / "site")}
    proc = run_cli("images", "build", "tf1.14-nccl", "--system", "p9", "--dry-run", env=env)
    assert proc.returncode == 2
    assert "image 'tf1.14-nccl' is built for x86_64, not ppc64le (system 'p9')" in proc.stderr
    proc = run_cli("plan", "trivial", "--image", "powerai1.6", env=env)
    assert proc.returncode == 2
    assert "image 'powerai1.6' is built for ppc64le, but system 'localhost' is x86_64" in proc.stderr


def write_spec(tmp_path: Path, mutate) -> dict:
    data = yaml.safe_load((REPO / "containers" / "tf1.14-nccl" / "image.yaml").read_text())
    data["name"] = "site-tf"
    mutate(data)
    folder = tmp_path / "site" / "containers" / "site-tf"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "image.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return {"DLRUN_PATH": str(tmp_path / "site")}


@pytest.mark.parametrize("mutate,field,message", [
    (lambda d: d["mpi"].pop("version"), "mpi.version", "Field required"),
    (lambda d: d.pop("nccl"), "nccl", "Field required"),
    (lambda d: d["horovod"].update(version="0.16"), None, None),  # a version, exact enough: accepted
    (lambda d: d["horovod"].update(version="latest"), "horovod.version", "not a pinned version"),
    (lambda d: d["nccl_tests"].update(version=">=2.0"), "nccl_tests.version", "not a pinned version"),
    (lambda d: d["framework_install"].update(packages=["tensorflow-gpu"]), "framework_install",
     "'tensorflow-gpu' is not pinned; write NAME==VERSION"),
    (lambda d: d["base"]["x86_64"].update(tag="latest"), "base.x86_64.tag", "moves"),
    (lambda d: d["benchmarks"][0].pop("commit"), "benchmarks.0", "commit: required"),
    (lambda d: d["cuda"].update(stated_in="Samsi"), "cuda", "exactly one of stated_in"),
    (lambda d: d["cudnn"].pop("chosen"), "cudnn", "exactly one of stated_in"),
    (lambda d: d.update(framework_version=None), "framework_version", "valid string"),
])
def test_spec_missing_or_unpinned_version_names_the_field(image_home, tmp_path, mutate, field, message):
    env = {**image_home["env"], **write_spec(tmp_path, mutate)}
    proc = run_cli("images", "show", "site-tf", env=env)
    if field is None:
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 2, proc.stdout
    assert "containers/site-tf/image.yaml:" in proc.stderr
    assert f": {field}: " in proc.stderr and message in proc.stderr, proc.stderr


def test_spec_folder_must_match_its_name(image_home, tmp_path):
    env = {**image_home["env"], **write_spec(tmp_path, lambda d: d.update(name="other"))}
    proc = run_cli("images", "list", env=env)
    assert proc.returncode == 2 and "must match its folder 'site-tf'" in proc.stderr


# ------------------------------------------------------------------------------------------------ lock and digests
def test_lock_file_is_deterministic_yaml(image_home):
    from dlrun.images import lock

    lock.record("b-image", "x86_64", digest="sha256:" + "b" * 64)
    lock.record("a-image", "ppc64le", digest="sha256:" + "a" * 64, sif="sha256:" + "c" * 64)
    text = image_home["lock"].read_text()
    assert text.startswith("# Content digests")
    data = yaml.safe_load(text)
    assert list(data["images"]) == ["a-image", "b-image"] and data["version"] == 1
    lock.record("a-image", "ppc64le", rootfs="sha256:" + "d" * 64)
    entry = lock.entry("a-image", "ppc64le")
    assert entry["digest"] == "sha256:" + "a" * 64 and entry["rootfs"] == "sha256:" + "d" * 64


def test_tree_digest_covers_content_and_modes_not_times_or_owners(tmp_path):
    from dlrun.images.digest import tree_digest

    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "f").write_text("a")
    (root / "bin").symlink_to("usr/bin")
    first = tree_digest(root)
    os.utime(root / "etc" / "f", (1, 1))
    assert tree_digest(root) == first
    (root / "etc" / "f").chmod(0o600)
    assert tree_digest(root) != first
    (root / "etc" / "f").chmod(0o644)
    second = tree_digest(root)
    (root / "etc" / "f").write_text("b")
    assert tree_digest(root) != second


def tiny_layer(files: dict[str, bytes | None]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_docker_archive_round_trip_whiteouts_and_tampering(tmp_path):
    from dlrun.errors import DlrunError
    from dlrun.images.archive import Layer, read_docker_archive, unpack_docker_archive, write_docker_archive
    from dlrun.images.digest import bytes_sha256

    low = tiny_layer({"etc": None, "etc/keep": b"k", "etc/gone": b"g", "opt": None, "opt/old": b"o"})
    high = tiny_layer({"etc/.wh.gone": b"", "opt/.wh..wh..opq": b"", "opt/new": b"n"})
    layers = [Layer(bytes_sha256(low), None, low), Layer(bytes_sha256(high), None, high)]
    config = {"architecture": "amd64", "os": "linux", "config": {"Labels": {"dlrun.image": "x"}},
              "rootfs": {"type": "layers", "diff_ids": [l.diff_id for l in layers]}}
    archive = tmp_path / "x.tar"
    image_id = write_docker_archive(archive, config, layers, ["localhost/dlrun/x:x86_64"], 0)
    info = read_docker_archive(archive)
    assert info.image_id == image_id == "sha256:" + hashlib.sha256(
        json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    unpack_docker_archive(archive, tmp_path / "root")
    assert sorted(str(p.relative_to(tmp_path / "root")) for p in (tmp_path / "root").rglob("*")) == \
        ["etc", "etc/keep", "opt", "opt/new"]
    # A layer whose bytes differ from the config's digest is refused before anything is unpacked.
    bad = [layers[0], Layer(layers[1].diff_id, None, tiny_layer({"opt/evil": b"x"}))]
    write_docker_archive(tmp_path / "bad.tar", config, bad, [], 0)
    with pytest.raises(DlrunError, match="the archive is damaged or was altered"):
        unpack_docker_archive(tmp_path / "bad.tar", tmp_path / "root2")
    assert not (tmp_path / "root2").exists()


def fake_rootfs(store: Path) -> Path:
    rootfs = store / "cpu-reference" / "x86_64" / "rootfs"
    (rootfs / "data").mkdir(parents=True)
    (rootfs / "etc").mkdir()
    (rootfs / "etc" / "os-release").write_text("fake\n")
    return rootfs


def test_verify_refuses_a_digest_mismatch_and_shows_both(image_home):
    from dlrun.images import lock
    from dlrun.images.digest import tree_digest

    rootfs = fake_rootfs(image_home["store"])
    actual = tree_digest(rootfs)
    recorded = "sha256:" + "0" * 64
    lock.record("cpu-reference", "x86_64", digest="sha256:" + "1" * 64, rootfs=recorded)
    proc = run_cli("images", "verify", "cpu-reference", "--arch", "x86_64", "--engine", "charliecloud",
                   env=image_home["env"])
    assert proc.returncode == 1
    assert f"images.lock records {recorded}, but {rootfs} has {actual}; refusing it" in proc.stderr
    lock.record("cpu-reference", "x86_64", rootfs=actual)
    proc = run_cli("images", "verify", "cpu-reference", "--arch", "x86_64", "--engine", "charliecloud",
                   env=image_home["env"])
    assert proc.returncode == 0 and "matches images.lock" in proc.stdout


def test_run_refuses_a_digest_mismatch_and_an_unlocked_image(image_home, tmp_path):
    from dlrun.images import lock

    rootfs = fake_rootfs(image_home["store"])
    args = ("run", "trivial", "--image", "cpu-reference", "--runtime", "charliecloud", "--steps", "1")
    proc = run_cli(*args, env=image_home["env"])
    assert proc.returncode == 2  # refused by the pre-launch checks, as `dlrun doctor` reports it
    assert "image cpu-reference (x86_64) has no digest in" in proc.stderr and "dlrun images build" in proc.stderr
    lock.record("cpu-reference", "x86_64", digest="sha256:" + "1" * 64, rootfs="sha256:" + "2" * 64)
    proc = run_cli(*args, env=image_home["env"])
    assert proc.returncode == 1
    assert "digest mismatch for image cpu-reference (x86_64), runtime charliecloud: images.lock records " \
           f"sha256:{'2' * 64}, but {rootfs} has sha256:" in proc.stderr
    assert not list(Path(image_home["env"]["DLRUN_HOME"]).glob("runs/*")), "nothing may run"


# ------------------------------------------------------------------------------------------------ runtimes
def script(env: dict, *args: str) -> str:
    proc = run_cli("run", "trivial", "--image", "cpu-reference", "--steps", "2", "--warmup-steps", "1",
                   "--threads", "2", *args, "--dry-run", env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def exec_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("exec "))


def plan_for(runtime: str, data: Path, **options):
    from dlrun.catalog import load_catalog
    from dlrun.probe.host import probe_host
    from dlrun.plan import resolve_plan

    from dlrun.images.verify import with_local_image

    return resolve_plan(load_catalog(host=probe_host()), "trivial", image="cpu-reference", runtime=runtime,
                        data_dir=str(data), threads_per_rank=2, local_image=with_local_image, **options)


def wrapped(runtime: str, data: Path, **options) -> str:
    """The runtime's exact command for a fixed rank command (independent of this machine's fabric)."""
    from dlrun.job import RankCommand
    from dlrun.shell import Expand, join
    from dlrun.registry import RUNTIMES

    rank = RankCommand(argv=["python3", "/opt/dlrun/harness_pytorch.py", "--model", "trivial"],
                       env={"OMP_NUM_THREADS": "2", "MASTER_PORT": Expand("${DLRUN_MASTER_PORT:-29500}")})
    return join(RUNTIMES.get(runtime).wrap(plan_for(runtime, data, **options), rank).argv)


def test_runtime_commands(image_home, tmp_path):
    import sys

    from dlrun.images import lock

    data = tmp_path / "dataset"
    data.mkdir()
    digest = "sha256:" + "e" * 64
    lock.record("cpu-reference", "x86_64", digest=digest)
    rootfs = image_home["store"] / "cpu-reference" / "x86_64" / "rootfs"
    harness = "python3 /opt/dlrun/harness_pytorch.py --model trivial"
    assert wrapped("charliecloud", data) == (
        "ch-run --env-no-expand --unset-env=PYTHONPATH --unset-env=PYTHONHOME --unset-env=LD_LIBRARY_PATH "
        "--unset-env=LD_PRELOAD --unset-env=VIRTUAL_ENV --set-env \"--set-env=MASTER_PORT=${DLRUN_MASTER_PORT:-29500}\" "
        "--set-env=OMP_NUM_THREADS=2 \"--set-env=USER=${USER:-$(id -un)}\" "
        f"-b {data}:/data -u 0 -g 0 {rootfs} -- /bin/sh -c 'mount -o remount,bind,ro /data && exec \"$@\"' "
        f"dlrun-ro-binds {harness}")
    rest = ("--cap-add IPC_LOCK -v \"${DLRUN_RUN_DIR}:${DLRUN_RUN_DIR}\" -w \"${DLRUN_RUN_DIR}\" "
            f"-v {data}:/data:ro -e MASTER_PORT -e OMP_NUM_THREADS")
    assert wrapped("docker", data) == ("docker run --rm --network=host --ipc=host --ulimit memlock=-1 --ulimit "
                                       f"stack=67108864 {rest} {digest} {harness}")
    # Podman may not raise limits (rootless, or no CAP_SYS_RESOURCE as on CI): the node's own limits.
    options = f"--rm --network=host --ipc=host --ulimit host {rest}"
    assert wrapped("podman", data) == f"podman run {options} {digest} {harness}"
    assert wrapped("docker-api", data) == (
        f"{sys.executable} -m dlrun.images.docker_run --image {digest} --expect-digest {digest} "
        "-v \"${DLRUN_RUN_DIR}:${DLRUN_RUN_DIR}\" -w \"${DLRUN_RUN_DIR}\" "
        f"-v {data}:/data:ro -e MASTER_PORT -e OMP_NUM_THREADS -- {harness}")
    # The job script runs exactly that, with the harness arguments of the plan.
    line = exec_line(script(image_home["env"], "--runtime", "podman", "--data", str(data)))
    assert line.startswith(f"exec podman run {options.split(' -e ')[0]} -e ")
    assert line.endswith(f"{digest} python3 /opt/dlrun/harness_pytorch.py --model trivial --batch-size 64 --steps 2 "
                         "--warmup-steps 1 --precision fp32 --device cpu --threads 2 --expected-world-size 1 "
                         "--timeout-s 1800")


def test_runtime_gpu_and_device_flags(image_home, tmp_path):
    """CUDA plans get the GPUs (Docker --gpus, Podman CDI); fabric devices are passed one by one."""
    from dlrun.plan import Plan
    from dlrun.job import RankCommand
    from dlrun.registry import RUNTIMES

    data = tmp_path / "dataset"
    data.mkdir()
    plan = plan_for("docker", data)
    gpu = Plan(**{**dict(plan), "device": "cuda", "devices": ["/dev/infiniband/uverbs0"]})
    rank = RankCommand(argv=["true"])
    docker = RUNTIMES.get("docker").wrap(gpu, rank).argv
    assert docker[docker.index("--gpus") + 1] == "all"
    assert docker[docker.index("--device") + 1] == "/dev/infiniband/uverbs0"
    podman = RUNTIMES.get("podman").wrap(gpu, rank).argv
    assert "nvidia.com/gpu=all" in podman and "/dev/infiniband/uverbs0" in podman and "--gpus" not in podman
    api = RUNTIMES.get("docker-api").wrap(gpu, rank).argv
    assert api[api.index("--gpus") + 1] == "all" and "/dev/infiniband/uverbs0" in api


def test_container_runtimes_need_a_container_image(image_home):
    proc = run_cli("run", "trivial", "--runtime", "charliecloud", "--dry-run", env=image_home["env"])
    assert proc.returncode == 2 and "needs a container image" in proc.stderr


def test_mpi_ranks_pass_their_variables_into_containers(image_home):
    from dlrun.images import lock

    lock.record("cpu-reference", "x86_64", digest="sha256:" + "e" * 64)
    text = script(image_home["env"], "--runtime", "docker", "--ranks-per-node", "2", "--threads", "1")
    assert "exec mpirun -np 2" in text
    line = exec_line(text)
    assert "sh -c 'exec docker run $(env | grep -oE \"^(OMPI_|PMIX_|OPAL_)[A-Za-z0-9_]*=\"" in line
    assert "-e OMPI_COMM_WORLD_RANK" in line
    podman = exec_line(script(image_home["env"], "--runtime", "podman", "--ranks-per-node", "2", "--threads", "1"))
    assert "'--env=OMPI_*' '--env=PMIX_*' '--env=OPAL_*'" in podman


def test_docker_run_helper_environment_and_volumes():
    from dlrun.images.docker_run import environment, parse_args, volumes

    args = parse_args(["--image", "sha256:x", "-v", "/a:/data:ro", "-v", "/r:/r", "-e", "A", "-e", "MISSING",
                       "--env-prefix", "OMPI_", "--", "python3", "-c", "print(1)"])
    assert args.command == ["python3", "-c", "print(1)"]
    assert environment(args.env, args.env_prefix, {"A": "1", "OMPI_X": "2", "B": "3"}) == {"A": "1", "OMPI_X": "2"}
    assert volumes(args.volumes) == {"/a": {"bind": "/data", "mode": "ro"}, "/r": {"bind": "/r", "mode": "rw"}}


def test_run_says_which_runtime_tool_is_missing(image_home, tmp_path):
    from dlrun.images import lock

    fake_rootfs(image_home["store"])
    lock.record("cpu-reference", "x86_64", digest="sha256:" + "1" * 64, rootfs="sha256:" + "2" * 64)
    env = {**image_home["env"], "PATH": f"{tmp_path}/empty-bin"}
    proc = run_cli("run", "trivial", "--image", "cpu-reference", "--runtime", "charliecloud", "--skip-checks", env=env)
    assert proc.returncode == 1
    assert "runtime charliecloud needs ch-run, which is not installed" in proc.stderr
    assert "apt-get install charliecloud" in proc.stderr
