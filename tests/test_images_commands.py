"""`dlrun images` commands without real images: exact --dry-run commands per engine, clear errors for
missing runtimes, bad input, the lock file, digests and Docker archives, and the runtimes' exact
container commands."""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from conftest import REPO, run_cli
from dlrun.errors import DlrunError, UsageError
from dlrun.images import lock
from dlrun.registry import ENGINES, Tool

SOCK = "unix:///tmp/dlrun-test-nonexistent.sock"


@pytest.fixture
def image_home(tmp_path, monkeypatch, dlrun_home):
    """A private image store, cache and lock; a Docker endpoint that does not exist; PATH without runtimes."""
    env = {"DLRUN_IMAGES_DIR": str(tmp_path / "store"), "DLRUN_CACHE_DIR": str(tmp_path / "cache"),
           "DLRUN_IMAGES_LOCK": str(tmp_path / "images.lock"), "DOCKER_HOST": SOCK, "DLRUN_HOME": str(dlrun_home)}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("CH_IMAGE_STORAGE", raising=False)  # ch-image's storage: dlrun's choice, under the cache
    return {"env": env, "store": tmp_path / "store", "cache": tmp_path / "cache", "lock": tmp_path / "images.lock",
            "tmp": tmp_path}


def dry(*args: str, env: dict) -> list[str]:
    proc = run_cli("images", *args, "--dry-run", env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


# ------------------------------------------------------------------------------------------------ engines
ENGINE_NAMES = ENGINES.names()
API = f"    # via the Docker API at {SOCK} (docker-py)"
FAKEROOT = [] if os.geteuid() == 0 else ["--fakeroot"]


def test_engine_registry_is_the_documented_set():
    """The parametrised tests below cover ENGINES.names(); each table must name every engine (KeyError else)."""
    assert ENGINE_NAMES == ["apptainer", "charliecloud", "debootstrap", "docker", "docker-api", "enroot", "podman",
                            "singularity"]
    for name in ENGINE_NAMES:
        engine = ENGINES.get(name)
        assert engine.tools, f"engine {name} declares no tool"
        assert all(isinstance(tool, Tool) and tool.install for tool in engine.tools)
        assert engine.lock_field in lock.FIELDS and engine.save_suffix.startswith(".")


def build_lines(engine: str, env: dict, image: str = "tf1.14-nccl") -> tuple[list[str], str]:
    """The dry run, and the build context it names (under the cache, named by its content)."""
    lines = dry("build", image, "--engine", engine, env=env)
    match = re.fullmatch(r"# assemble the build context (\S+) from the installed dlrun: (.*)", lines[0])
    assert match, lines[0]
    context = match.group(1)
    assert re.fullmatch(rf"{env['DLRUN_CACHE_DIR']}/build-contexts/{image}-x86_64-[0-9a-f]{{16}}", context)
    return lines[1:], context


SIF_FROM_DEF = ("# build from containers/tf1.14-nccl/Singularity.x86_64.def (`Bootstrap: docker` from "
                "nvidia/cuda:10.0-devel-ubuntu18.04)")


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_build_dry_run_commands(image_home, engine):
    env, store, cache = image_home["env"], image_home["store"], image_home["cache"]
    if engine == "debootstrap":
        proc = run_cli("images", "build", "tf1.14-nccl", "--engine", engine, "--dry-run", env=env)
        assert proc.returncode == 2 and "image 'tf1.14-nccl' has no `debootstrap:` section" in proc.stderr
        return
    lines, ctx = build_lines(engine, env)
    ref, recipe = "localhost/dlrun/tf1.14-nccl:x86_64", "containers/tf1.14-nccl/Dockerfile.x86_64"
    sif = store / "tf1.14-nccl" / "x86_64" / "tf1.14-nccl.sif"
    sqsh = store / "tf1.14-nccl" / "x86_64" / "tf1.14-nccl.sqsh"
    storage = f"CH_IMAGE_STORAGE={cache}/ch-image"
    expected = {
        "docker": [f"docker build --network host -f {recipe} -t {ref} --platform linux/amd64 {ctx}" + API],
        "docker-api": [f"docker build --network host -f {recipe} -t {ref} --platform linux/amd64 {ctx}" + API],
        "podman": [f"podman build --network host -f {recipe} -t {ref} --platform linux/amd64 {ctx}" + API],
        "singularity": [SIF_FROM_DEF, f"mkdir -p {sif.parent}",
                        f"cd {ctx} && singularity build {' '.join(FAKEROOT + [str(sif)])} "
                        "containers/tf1.14-nccl/Singularity.x86_64.def"],
        "apptainer": [SIF_FROM_DEF, f"mkdir -p {sif.parent}",
                      f"cd {ctx} && apptainer build {' '.join(FAKEROOT + [str(sif)])} "
                      "containers/tf1.14-nccl/Singularity.x86_64.def"],
        "charliecloud": [f"cd {ctx} && {storage} ch-image build --force -t dlrun/tf1.14-nccl:x86_64 -f {recipe} .",
                         f"{storage} ch-convert -i ch-image -o dir dlrun/tf1.14-nccl:x86_64 {store}/tf1.14-nccl/x86_64/rootfs"],
        "enroot": [f"cd {ctx} && podman build --platform linux/amd64 -f {recipe} -t {ref} .",
                   f"mkdir -p {sqsh.parent}", f"rm -f {sqsh}    # enroot import refuses to overwrite its output",
                   f"enroot import --arch x86_64 -o {sqsh} podman://{ref}"],
    }
    assert lines == expected[engine]
    assert not Path(ctx).exists(), "a dry run writes nothing"
    assert str(REPO) not in "\n".join(lines), "builds never read from the source tree"


def test_site_spec_builds_from_its_own_recipe_and_a_missing_one_is_named(image_home, tmp_path):
    env = {**image_home["env"], **write_spec(tmp_path, lambda d: d.update(uri="registry.site.example/tf"))}
    proc = run_cli("images", "build", "site-tf", "--engine", "docker", "--dry-run", env=env)
    assert proc.returncode == 1
    assert "site/containers/site-tf/Dockerfile.x86_64 does not exist; render it: dlrun images render site-tf" \
        in proc.stderr
    assert run_cli("images", "render", "site-tf", env=env).returncode == 0
    lines, _ = build_lines("docker", env, "site-tf")
    assert lines[0].startswith("docker build --network host -f containers/site-tf/Dockerfile.x86_64 -t registry.site.example/tf:x86_64")


def test_debootstrap_dry_run(image_home):
    lines = dry("build", "cpu-reference", "--engine", "charliecloud", "--arch", "x86_64", env=image_home["env"])
    base = next((image_home["cache"] / "debootstrap").glob("*"), None) if (image_home["cache"] / "debootstrap").exists() else None
    assert base is None  # a dry run creates nothing
    assert lines[0].startswith("debootstrap --variant=minbase --arch=amd64 "
                               "--include=fio,libtcmalloc-minimal4,openmpi-bin,python3,python3-crc32c,python3-numpy,python3-pil,"
                               "python3-torch bookworm "
                               f"{image_home['cache']}/debootstrap/bookworm-x86_64-")
    assert lines[0].split("    #")[0].endswith("/rootfs.tmp http://deb.debian.org/debian")
    assert lines[1].startswith("tar --sort=name --format=posix --numeric-owner --owner=0 --group=0 ")
    assert lines[2].startswith("cp -al ") and lines[2].endswith(f"{image_home['store']}/cpu-reference/x86_64/rootfs.tmp")
    assert lines[3].startswith("# dlrun's layer") and lines[4].startswith("# write ")
    assert dry("build", "cpu-reference", "--engine", "debootstrap", "--arch", "x86_64", env=image_home["env"]) == lines


@pytest.mark.parametrize("engine", ["apptainer", "singularity"])
def test_sif_of_a_debian_spec_is_converted_from_its_docker_archive(image_home, engine):
    """Singularity.<arch>.def bootstraps from Docker Hub; a Debian spec's SIF comes from the archive dlrun
    bootstraps without a registry (bootstrapped first when the store has none), and the dry run says so."""
    from dlrun.images.archive import Layer, write_docker_archive
    from dlrun.images.digest import bytes_sha256

    env, folder = image_home["env"], image_home["store"] / "cpu-reference" / "x86_64"
    says = (f"# build from the Docker archive {folder}/image.tar that dlrun bootstraps without a registry, not from "
            "containers/cpu-reference/Singularity.x86_64.def: its `Bootstrap: docker` pulls amd64/debian:bookworm-slim "
            "from a registry")
    convert = [f"mkdir -p {folder}", f"{engine} build --force {folder}/cpu-reference.sif docker-archive://{folder}/image.tar"]
    debootstrap = dry("build", "cpu-reference", "--engine", "debootstrap", "--arch", "x86_64", env=env)
    lines = dry("build", "cpu-reference", "--engine", engine, "--arch", "x86_64", env=env)
    assert lines == [says, *debootstrap, *convert]
    layer = tiny_layer({"etc": None, "etc/os-release": b"x"})
    config = {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [bytes_sha256(layer)]}}
    image_id = write_docker_archive(folder / "image.tar", config, [Layer(bytes_sha256(layer), None, layer)], [], 0)
    lock.record("cpu-reference", "x86_64", digest=image_id)
    assert dry("build", "cpu-reference", "--engine", engine, "--arch", "x86_64", env=env) == [says, *convert]
    lock.record("cpu-reference", "x86_64", digest="sha256:" + "d" * 64)  # the store's archive is not the locked one
    proc = run_cli("images", "build", "cpu-reference", "--engine", engine, "--arch", "x86_64", "--dry-run", env=env)
    assert proc.returncode == 1
    assert f"images.lock records sha256:{'d' * 64}, but {folder}/image.tar has {image_id}" in proc.stderr


@pytest.mark.parametrize("location,plain_http", [
    ("oras://127.0.0.1:5000/site/cpu:x86_64", True), ("docker://localhost:5000/site/cpu:x86_64", True),
    ("[::1]:5000/site/cpu:x86_64", True), ("oras://127.20.0.1/site/cpu:x86_64", True),
    ("oras://registry.example.org:5000/site/cpu:x86_64", False), ("oras://10.0.0.1:5000/site/cpu:x86_64", False),
    ("library://127.0.0.1/site/cpu", False), ("site/cpu:x86_64", False)])
def test_sif_engines_speak_plain_http_to_a_loopback_registry_only(image_home, location, plain_http):
    """As Docker treats 127.0.0.0/8 as an insecure registry; every other registry is spoken to over HTTPS."""
    from dlrun.images import ops

    pull = ops.pull("cpu-reference", location, engine="apptainer", arch="x86_64", dry_run=True).steps[1].argv
    assert ("--no-https" in pull) is plain_http
    if location.startswith("oras://"):
        push = ops.push("cpu-reference", location, engine="apptainer", arch="x86_64", dry_run=True).steps[0].argv
        assert push == ["apptainer", "push", *(["--no-https"] if plain_http else []),
                        str(image_home["store"] / "cpu-reference" / "x86_64" / "cpu-reference.sif"), location]


# Every `--from` form, as each family of engines' tool takes it (None: refused, exit 2).
SOURCES = {
    "registry.example.org/dlrun/cpu:aarch64": {
        "api": "registry.example.org/dlrun/cpu:aarch64", "sif": "docker://registry.example.org/dlrun/cpu:aarch64",
        "ch": "registry.example.org/dlrun/cpu:aarch64", "enroot": "docker://registry.example.org#dlrun/cpu:aarch64"},
    "docker://registry.example.org/dlrun/cpu:aarch64": {
        "api": "registry.example.org/dlrun/cpu:aarch64", "sif": "docker://registry.example.org/dlrun/cpu:aarch64",
        "ch": "registry.example.org/dlrun/cpu:aarch64", "enroot": "docker://registry.example.org#dlrun/cpu:aarch64"},
    "docker://registry.example.org:5000#dlrun/cpu:aarch64": {  # enroot's own form, read by every engine
        "api": "registry.example.org:5000/dlrun/cpu:aarch64",
        "sif": "docker://registry.example.org:5000/dlrun/cpu:aarch64",
        "ch": "registry.example.org:5000/dlrun/cpu:aarch64",
        "enroot": "docker://registry.example.org:5000#dlrun/cpu:aarch64"},
    "arm64v8/debian:bookworm-slim": {  # Docker Hub: no registry part
        "api": "arm64v8/debian:bookworm-slim", "sif": "docker://arm64v8/debian:bookworm-slim",
        "ch": "arm64v8/debian:bookworm-slim", "enroot": "docker://arm64v8/debian:bookworm-slim"},
    "docker://localhost/dlrun/cpu@sha256:" + "a" * 64: {
        "api": "localhost/dlrun/cpu@sha256:" + "a" * 64, "sif": "docker://localhost/dlrun/cpu@sha256:" + "a" * 64,
        "ch": "localhost/dlrun/cpu@sha256:" + "a" * 64, "enroot": "docker://localhost#dlrun/cpu@sha256:" + "a" * 64},
    "oras://registry.example.org/dlrun/cpu:sif": {
        "api": None, "sif": "oras://registry.example.org/dlrun/cpu:sif", "ch": None, "enroot": None},
    "library://dlrun/default/cpu:aarch64": {
        "api": None, "sif": "library://dlrun/default/cpu:aarch64", "ch": None, "enroot": None},
    "https://example.org/images/cpu.sif": {
        "api": None, "sif": "https://example.org/images/cpu.sif", "ch": None, "enroot": None},
    "dockerd://dlrun/cpu:aarch64": {"api": None, "sif": None, "ch": None, "enroot": "dockerd://dlrun/cpu:aarch64"},
    "podman://localhost/dlrun/cpu:aarch64": {
        "api": None, "sif": None, "ch": None, "enroot": "podman://localhost/dlrun/cpu:aarch64"},
}
FAMILY = {"docker": "api", "docker-api": "api", "podman": "api", "singularity": "sif", "apptainer": "sif",
          "charliecloud": "ch", "debootstrap": "ch", "enroot": "enroot"}
VALID = {"api": "REPO:TAG (a registry reference), docker://...",
         "sif": "REPO:TAG (a registry reference), docker://..., oras://..., library://..., shub://..., http://..., "
                "https://...",
         "ch": "REPO:TAG (a registry reference), docker://...",
         "enroot": "REPO:TAG (a registry reference), docker://..., dockerd://..., podman://..."}


def pull_steps(engine: str, source: str, store: Path, cache: Path) -> list[str]:
    """The exact dry run of `dlrun images pull cpu-reference --arch aarch64 --from <as the tool takes it>`."""
    ref = "localhost/dlrun/cpu-reference:aarch64"
    folder = store / "cpu-reference" / "aarch64"
    storage = f"CH_IMAGE_STORAGE={cache}/ch-image"
    cli = {"docker-api": "docker"}.get(engine, engine)
    http = "--no-https " if source.startswith("docker://localhost/") else ""  # a registry on this machine
    tls = "--tls-no-verify " if source.startswith("localhost/") else ""  # a loopback registry: Docker's rule
    pull_env = storage + (" CURL_CA_BUNDLE='' REQUESTS_CA_BUNDLE=''" if tls else "")
    return {
        "api": [f"# resolve {source} to its aarch64 image in the registry (oras-py): the manifest by digest, and "
                "its image config, whose digest must be the image ID asked for and locked",
                f"{cli} pull --platform linux/arm64 {source}" + API, f"{cli} tag {source} {ref}" + API],
        "sif": [f"mkdir -p {folder}", f"{engine} pull --force {http}{folder}/.cpu-reference.sif.pull {shlex.quote(source)}",
                f"# compare its sha256 with images.lock, then move it to {folder}/cpu-reference.sif"],
        "ch": [f"{pull_env} ch-image pull {tls}--arch=arm64/v8 {source} dlrun/cpu-reference:aarch64",
               f"{storage} ch-convert -i ch-image -o dir dlrun/cpu-reference:aarch64 {folder}/rootfs"],
        "enroot": [f"mkdir -p {folder}", f"rm -f {folder}/cpu-reference.sqsh    # enroot import refuses to overwrite its output",
                   f"enroot import --arch aarch64 -o {folder}/cpu-reference.sqsh {shlex.quote(source)}"],
    }[FAMILY[engine]]


@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_pull_renders_what_each_engine_takes(image_home, engine, source):
    from dlrun.images import ops

    rendered = SOURCES[source][FAMILY[engine]]
    if rendered is None:
        with pytest.raises(UsageError) as refused:
            ops.pull("cpu-reference", source, engine=engine, arch="aarch64", dry_run=True)
        scheme = source.split("://")[0]
        assert str(refused.value) == (f"engine {engine} cannot pull from {source!r} (scheme {scheme}://); "
                                      f"valid for {engine}: {VALID[FAMILY[engine]]}")
        return
    result = ops.pull("cpu-reference", source, engine=engine, arch="aarch64", dry_run=True)
    assert [step.text() for step in result.steps] == pull_steps(engine, rendered, image_home["store"],
                                                                image_home["cache"])


def test_enroot_pull_writes_the_registry_as_pyxis_does(dlrun_home):
    """The engine's `REGISTRY#REPO` is the form the pyxis runtime gives `--container-image` for the same image."""
    from dlrun.catalog import load_catalog
    from dlrun.images.refs import enroot_docker_uri, parse_location
    from dlrun.plan import resolve_plan
    from dlrun.runtimes.enroot import pyxis_image

    plan = resolve_plan(load_catalog(), "resnet50", system="dgx-h100")
    for reference in ("nvcr.io/nvidia/pytorch:24.12-py3", "localhost/dlrun/cpu-reference:x86_64",
                      "registry.example.org:5000/dlrun/cpu:x86_64", "nvidia/cuda:12.6.3-base-ubuntu22.04"):
        pulled = plan.model_copy(update={"image": plan.image.model_copy(update={"repo_digest": reference})})
        assert enroot_docker_uri(parse_location(reference)) == f"docker://{pyxis_image(pulled)}"


def test_images_help_names_every_engine():
    text = run_cli("images", "build", "--help", env={"COLUMNS": "300"}).stdout
    assert all(re.search(rf"\b{re.escape(name)}\b", text) for name in ENGINE_NAMES), text


def test_pull_from_a_scheme_the_engine_cannot_take_is_one_line_exit_2(image_home):
    proc = run_cli("images", "pull", "cpu-reference", "--from", "oras://registry.example.org/dlrun/cpu:sif",
                   "--engine", "docker", "--dry-run", env=image_home["env"])
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("dlrun: error: engine docker cannot pull from 'oras://registry.example.org/dlrun/cpu:sif' "
                           "(scheme oras://); valid for docker: REPO:TAG (a registry reference), docker://...\n")
    proc = run_cli("images", "pull", "cpu-reference", "--from", "dokcer://registry.example.org/dlrun/cpu:x86_64",
                   "--engine", "enroot", "--dry-run", env=image_home["env"])
    assert proc.returncode == 2 and "(scheme dokcer://); did you mean docker://?; valid for enroot:" in proc.stderr


def test_enroot_pulls_an_ngc_image_into_the_store(image_home):
    sqsh = image_home["store"] / "pytorch2.6-ngc24.12" / "x86_64" / "pytorch2.6-ngc24.12.sqsh"
    assert dry("pull", "pytorch2.6-ngc24.12", "--arch", "x86_64", "--from", "nvcr.io/nvidia/pytorch:24.12-py3",
               "--engine", "enroot", env=image_home["env"])[-1] == \
        f"enroot import --arch x86_64 -o {sqsh} 'docker://nvcr.io#nvidia/pytorch:24.12-py3'"


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_push_save_load_verify_lock_dry_run_commands(image_home, engine):
    env, store = image_home["env"], image_home["store"]
    folder = store / "cpu-reference" / "aarch64"
    ref, common = "localhost/dlrun/cpu-reference:aarch64", ["cpu-reference", "--arch", "aarch64", "--engine", engine]
    cli = {"docker-api": "docker"}.get(engine, engine)
    family = FAMILY[engine]
    registry, oras = "registry.example.org/dlrun/cpu:aarch64", "oras://registry.example.org/dlrun/cpu:sif"
    # an image goes to its architecture's tag, then into the OCI image index at the tag given
    arch_tag = registry + "-aarch64"
    index = f"# add {arch_tag} (aarch64) to the OCI image index {registry} (oras-py)"
    pushes = {"api": {registry: [f"{cli} tag {ref} {arch_tag}" + API, f"{cli} push {arch_tag}" + API, index],
                      oras: None},
              "sif": {registry: None, oras: [f"{engine} push {folder}/cpu-reference.sif {oras}"]},
              "ch": {registry: [f"CH_IMAGE_STORAGE={image_home['cache']}/ch-image ch-image push --image "
                                f"{folder}/rootfs dlrun/cpu-reference:aarch64 {arch_tag}", index], oras: None},
              "enroot": {registry: None, oras: None}}[family]
    for destination, expected in pushes.items():
        proc = run_cli("images", "push", *common, "--to", destination, "--dry-run", env=env)
        if expected is None:
            assert proc.returncode == 2, proc.stdout
            assert (f"engine {engine} cannot push" in proc.stderr and "valid" in proc.stderr), proc.stderr
        else:
            assert proc.returncode == 0 and proc.stdout.splitlines() == expected, proc.stderr
    assert dry("save", *common, env=env) == {
        "api": [f"{cli} save -o cpu-reference_aarch64.tar {ref}" + API],
        "sif": [f"cp {folder}/cpu-reference.sif cpu-reference_aarch64.sif"],
        "ch": [f"cp {folder}/image.tar cpu-reference_aarch64.tar"],
        "enroot": [f"cp {folder}/cpu-reference.sqsh cpu-reference_aarch64.sqsh"]}[family]
    assert dry("load", "cpu.tar", *common, env=env) == {
        "api": [f"{cli} load -i cpu.tar" + API, f"{cli} tag '<loaded image>' {ref}" + API],
        "sif": [f"mkdir -p {folder}", f"cp cpu.tar {folder}/cpu-reference.sif"],
        "ch": [f"# unpack cpu.tar layer by layer (digests checked first) into {folder}/rootfs",
               f"cp cpu.tar {folder}/image.tar"],
        "enroot": ["# compare the image ID of cpu.tar with images.lock", "podman load -i cpu.tar",
                   f"podman tag '<loaded image>' {ref}", f"mkdir -p {folder}",
                   f"rm -f {folder}/cpu-reference.sqsh    # enroot import refuses to overwrite its output",
                   f"enroot import --arch aarch64 -o {folder}/cpu-reference.sqsh podman://{ref}"]}[family]
    if family == "enroot":  # another site's saved .sqsh is copied as it is
        assert dry("load", "cpu.sqsh", *common, env=env) == [f"mkdir -p {folder}",
                                                             f"cp cpu.sqsh {folder}/cpu-reference.sqsh"]
    what = {"api": "image ID", "sif": "SIF file", "ch": "root filesystem", "enroot": "squashfs file"}[family]
    assert dry("verify", *common, env=env) == [f"# compare the {what} of cpu-reference (aarch64) with images.lock"]
    assert dry("lock", *common, env=env) == [f"# record the {what} of cpu-reference (aarch64) in {image_home['lock']}"]


def test_every_program_an_engine_runs_says_how_to_install_it(image_home):
    from dlrun.images import ops
    from dlrun.images.steps import TOOLS, Command

    seen = set()
    for engine in ENGINE_NAMES:
        image = "cpu-reference" if engine == "debootstrap" else "tf1.14-nccl"
        results = [ops.build(image, engine=engine, dry_run=True),
                   ops.load(image, Path("x.tar"), engine=engine, dry_run=True)]
        if ENGINES.get_class(engine).supports("pull"):
            results.append(ops.pull(image, "registry.example.org/x:y", engine=engine, dry_run=True))
        for result in results:
            seen |= {step.argv[0] for step in result.steps if isinstance(step, Command)}
    assert seen - set(TOOLS) == set()
    assert {"enroot", "podman", "singularity", "apptainer", "ch-image", "debootstrap"} <= seen


# ------------------------------------------------------------------------------------------------ missing runtimes
@pytest.mark.parametrize("engine,args,hint", [
    ("singularity", ("build", "cpu-reference"), "install SingularityCE"),
    ("apptainer", ("build", "cpu-reference"), "install Apptainer"),
    ("enroot", ("pull", "cpu-reference", "--from", "docker://debian:bookworm"), "install enroot: the .deb/.rpm packages"),
])
def test_missing_runtime_says_what_to_install(image_home, engine, args, hint, tmp_path):
    env = {**image_home["env"], "PATH": f"{tmp_path}/empty-bin:/usr/bin:/bin"}
    proc = run_cli("images", *args, "--arch", "x86_64", "--engine", engine, env=env)
    assert proc.returncode == 1
    assert f"{engine} is not installed (not on PATH)" in proc.stderr and hint in proc.stderr
    assert "--dry-run" in proc.stderr


def test_an_engine_that_cannot_do_an_operation_names_those_that_can(image_home):
    proc = run_cli("images", "push", "cpu-reference", "--to", "registry.example.org/x:y", "--engine", "enroot",
                   "--dry-run", env=image_home["env"])
    assert proc.returncode == 2
    assert proc.stderr == ("dlrun: error: engine enroot cannot push images; valid: --engine apptainer, charliecloud, "
                           "debootstrap, docker, docker-api, podman, singularity\n")


def test_unreachable_docker_api_says_how_to_start_one(image_home):
    proc = run_cli("images", "build", "tf1.14-nccl", env=image_home["env"])
    assert proc.returncode == 1
    assert f"cannot reach the Docker API at {SOCK}" in proc.stderr
    assert not (image_home["cache"] / "build-contexts").exists(), "nothing is assembled for an engine out of reach"
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


# ------------------------------------------------------------------------------------------------ enroot squashfs
def make_squashfs(tmp_path: Path, content: str) -> Path:
    """A real squashfs image (mksquashfs, as enroot import makes them) holding one file."""
    if shutil.which("mksquashfs") is None:
        pytest.fail("mksquashfs is needed: apt-get install squashfs-tools (`make sysdeps` installs it)", pytrace=False)
    tree = tmp_path / f"tree-{content}"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "os-release").write_text(content)
    out = tmp_path / f"{content}.sqsh"
    subprocess.run(["mksquashfs", str(tree), str(out), "-noappend", "-quiet", "-no-progress"], check=True,
                   capture_output=True)
    return out


def container_image(text: str) -> str:
    # the job's srun of the ranks (the telemetry sampler's srun step, started first, runs no container)
    srun = next(line for line in text.splitlines() if line.startswith("srun ") and "--container-image=" in line)
    return next(word for word in shlex.split(srun) if word.startswith("--container-image="))


def test_dgx_h100_job_runs_the_recorded_squashfs(image_home):
    """pyxis gets the site's .sqsh by absolute path: the lock's, or, for an image only this machine's registry
    (`localhost`) holds, the image store's, which `dlrun images pull --engine enroot` makes: never a
    `localhost#` reference the compute nodes would pull from themselves."""
    image = "pytorch2.6-ngc24.12"
    text = run_cli("run", "resnet50", "--system", "dgx-h100", "--nodes", "2", "--dry-run", env=image_home["env"],
                   check=True).stdout
    sqsh = image_home["store"] / image / "x86_64" / f"{image}.sqsh"
    assert container_image(text) == f"--container-image={sqsh}" and "localhost#" not in text
    assert f"# dlrun: assumes (container-reference): {sqsh} is on a file system every compute node mounts" in text
    lock.record(image, "x86_64", squashfs="sha256:" + "5" * 64, recorded_by="pull (enroot) nvcr.io/nvidia/pytorch:24.12-py3")
    text = run_cli("run", "resnet50", "--system", "dgx-h100", "--nodes", "2", "--dry-run", env=image_home["env"],
                   check=True).stdout
    assert sqsh.is_absolute()
    assert container_image(text) == f"--container-image={sqsh}"
    assert "#SBATCH --nodes=2" in text


def test_enroot_squashfs_load_verify_save_and_run_check(image_home, tmp_path):
    """Another site's .sqsh: loaded (copied, digest recorded), verified, saved, checked before a run; a
    different file is refused with both digests."""
    from dlrun.catalog import load_catalog
    from dlrun.images.digest import file_sha256
    from dlrun.images.verify import verify_plan_image, with_local_image
    from dlrun.plan import resolve_plan

    env, image = image_home["env"], "pytorch2.6-ngc24.12"
    good, other = make_squashfs(tmp_path, "good"), make_squashfs(tmp_path, "other")
    common = [image, "--arch", "x86_64", "--engine", "enroot"]
    proc = run_cli("images", "load", str(good), *common, env=env)
    assert proc.returncode == 0, proc.stderr
    stored = image_home["store"] / image / "x86_64" / f"{image}.sqsh"
    entry = json.loads(proc.stdout)
    assert entry["squashfs"] == file_sha256(good) == file_sha256(stored)
    assert entry["recorded_by"] == f"load (enroot) {good.name}"
    assert lock.entry(image, "x86_64")["squashfs"] == entry["squashfs"]
    proc = run_cli("images", "verify", *common, env=env)
    assert proc.returncode == 0 and f"squashfs file {entry['squashfs']}: matches images.lock" in proc.stdout
    proc = run_cli("images", "save", *common, "-o", str(tmp_path / "handed-on.sqsh"), env=env)
    assert proc.returncode == 0 and (tmp_path / "handed-on.sqsh").read_bytes() == good.read_bytes()
    proc = run_cli("images", "load", str(other), *common, env=env)
    assert proc.returncode == 1
    assert f"images.lock records {entry['squashfs']}, but {other} has {file_sha256(other)}" in proc.stderr
    assert file_sha256(stored) == entry["squashfs"], "a refused load leaves the store alone"

    plan = resolve_plan(load_catalog(), "resnet50", system="dgx-h100", local_image=with_local_image)
    assert plan.runtime == "enroot" and plan.image.squashfs == str(stored)
    check = verify_plan_image(plan)["image_check"]
    assert check == {"runtime": "enroot", "verified": True, "field": "squashfs", "digest": entry["squashfs"],
                     "artifact": str(stored)}
    shutil.copyfile(other, stored)
    with pytest.raises(DlrunError, match=f"runtime enroot: images.lock records {entry['squashfs']}, but {stored} has "
                                         f"{file_sha256(other)}; refusing it"):
        verify_plan_image(plan)


def test_lock_and_build_caches_are_site_state(tmp_path, monkeypatch, dlrun_home):
    """The lock lives in the user's dlrun home (never the source tree); caches under the user's cache."""
    from dlrun.images.engines.charliecloud import storage_env

    for name in ("DLRUN_IMAGES_LOCK", "DLRUN_IMAGES_DIR", "DLRUN_CACHE_DIR", "CH_IMAGE_STORAGE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    assert lock.lock_path() == dlrun_home / "images.lock"
    lock.record("cpu-reference", "x86_64", digest="sha256:" + "1" * 64)
    assert (dlrun_home / "images.lock").is_file()
    assert not (REPO / "containers" / "images.lock").exists()
    assert storage_env() == {"CH_IMAGE_STORAGE": str(tmp_path / "xdg-cache" / "dlrun" / "ch-image")}
    monkeypatch.setenv("CH_IMAGE_STORAGE", "/srv/ch")
    assert storage_env() == {}, "a site's own ch-image storage is kept"


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
                        data=str(data), threads=2, local_image=with_local_image, **options)


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
    label = "--label=dlrun.run-dir=\"${DLRUN_RUN_DIR}\""
    # A CPU plan over TCP locks no memory: only the stack is raised (memlock past the node's hard limit needs
    # CAP_SYS_RESOURCE, which a daemon in an unprivileged container lacks).
    # Docker's container takes the rank's CPU affinity as its cpuset (the daemon starts it, not the CLI)
    assert wrapped("docker", data) == (
        "sh -c 'exec docker run --cpuset-cpus=\"$(awk '\"'\"'/^Cpus_allowed_list:/ {print $2}'\"'\"' /proc/self/status)\" "
        "\"$@\"' dlrun-docker --rm --init --user \"$(id -u):$(id -g)\" "
        f"{label} --network=host --ipc=host --ulimit stack=67108864 {rest} {digest} {harness}")
    # Podman may not raise limits (rootless, or no CAP_SYS_RESOURCE as on CI): the node's own limits.
    options = f"--rm {label} --network=host --ipc=host --ulimit host {rest}"
    assert wrapped("podman", data) == f"podman run {options} {digest} {harness}"
    assert wrapped("docker-api", data) == (
        f"{sys.executable} -m dlrun.images.docker_run --image {digest} --expect-digest {digest} "
        "-v \"${DLRUN_RUN_DIR}:${DLRUN_RUN_DIR}\" -w \"${DLRUN_RUN_DIR}\" "
        f"-v {data}:/data:ro -e MASTER_PORT -e OMP_NUM_THREADS -- {harness}")
    # The job script runs exactly that, with the harness arguments of the plan.
    line = exec_line(script(image_home["env"], "--runtime", "podman", "--data", str(data)))
    assert line.startswith(f"exec podman run {options.split(' -e ')[0]} -e ")
    # --data: the harness reads the bound dataset (--data-dir), never synthetic tensors instead
    assert line.endswith(f"{digest} python3 /opt/dlrun/harness_pytorch.py --model trivial --threads 2 --batch-size 64 "
                         "--steps 2 --warmup-steps 1 --precision fp32 --data-dir /data --timeout-s 1800 --device cpu "
                         "--expected-world-size 1")


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
    assert "memlock=-1" in docker and "memlock=-1" not in RUNTIMES.get("docker").wrap(plan, rank).argv
    assert docker[docker.index("--device") + 1] == "/dev/infiniband/uverbs0"
    podman = RUNTIMES.get("podman").wrap(gpu, rank).argv
    assert "nvidia.com/gpu=all" in podman and "/dev/infiniband/uverbs0" in podman and "--gpus" not in podman
    api = RUNTIMES.get("docker-api").wrap(gpu, rank).argv
    assert api[api.index("--gpus") + 1] == "all" and "/dev/infiniband/uverbs0" in api
    assert "--memlock" in api and "--memlock" not in RUNTIMES.get("docker-api").wrap(plan, rank).argv


def test_container_runtimes_need_a_container_image(image_home):
    proc = run_cli("run", "trivial", "--runtime", "charliecloud", "--dry-run", env=image_home["env"])
    assert proc.returncode == 2 and "needs a container image" in proc.stderr


def test_mpi_ranks_pass_their_variables_into_containers(image_home):
    from dlrun.images import lock

    lock.record("cpu-reference", "x86_64", digest="sha256:" + "e" * 64)
    text = script(image_home["env"], "--runtime", "docker", "--ranks-per-node", "2", "--threads", "1")
    assert "exec mpirun -np 2" in text
    line = exec_line(text)
    # under mpirun: the rank's cpuset, what mpirun's PMIx server needs (tests/test_host_mpi_containers.py), and
    # every OMPI_/PMIX_/OPAL_ variable
    assert "--pid=host --user \"$(id -u):$(id -g)\" ${PMIX_SERVER_TMPDIR:+-v" in line
    assert "$(env | grep -oE \"^(OMPI_|PMIX_|OPAL_)[A-Za-z0-9_]*=\"" in line and "--cpuset-cpus=" in line
    assert "-e OMPI_COMM_WORLD_RANK" in line
    podman = exec_line(script(image_home["env"], "--runtime", "podman", "--ranks-per-node", "2", "--threads", "1"))
    assert "'--env=OMPI_*' '--env=PMIX_*' '--env=OPAL_*'" in podman
    assert "sh -c 'exec podman run --pid=host" in podman and "--cpuset-cpus" not in podman  # Podman inherits it


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
