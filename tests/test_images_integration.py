"""cpu-reference for real: built with debootstrap, run under Charliecloud (ch-run) and under Podman driven
through the Docker API (docker-py against `podman system service`), with a dataset bound read-only, and
shared between two image stores through a Docker archive. Every run lands in the result store with the
image digest in its provenance."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from fixtures_images import dlrun, require_tools

from dlrun.paths import harness_files

pytestmark = pytest.mark.containers


@pytest.fixture
def dataset(tmp_path) -> Path:
    data = tmp_path / "dataset"
    data.mkdir()
    (data / "README").write_text("read-only dataset\n")
    return data


@pytest.fixture
def run_home(tmp_path) -> dict[str, str]:
    return {"DLRUN_HOME": str(tmp_path / "home")}


def stored_run(env: dict[str, str]) -> dict:
    runs = json.loads(dlrun("results", "list", "--json", env=env).stdout)
    assert runs, "no run was stored"
    return json.loads(dlrun("results", "show", runs[0]["id"], "--json", env=env).stdout)


def test_build_records_what_it_built(cpu_reference):
    entry, rootfs = cpu_reference["entry"], cpu_reference["rootfs"]
    assert entry["digest"].startswith("sha256:") and entry["rootfs"].startswith("sha256:")
    assert entry["recorded_by"] == "build (debootstrap)"
    spec = yaml.safe_load((REPO / "containers" / "cpu-reference" / "image.yaml").read_text())
    pins = {p["name"]: p["version"] for p in spec["debootstrap"]["packages"]}
    for name, version in pins.items():
        assert entry["packages"][name] == version or entry["packages"][name].startswith(version + "+b")
    for harness in harness_files("pytorch"):  # the entry file and its siblings
        assert (rootfs / "opt" / "dlrun" / harness.name).read_bytes() == harness.read_bytes()
    meta = json.loads((rootfs / "etc" / "dlrun" / "image.json").read_text())
    assert meta["labels"]["dlrun.image"] == "cpu-reference" and meta["packages"] == entry["packages"]
    assert (rootfs / "data").is_dir() and (rootfs / "ch" / "environment").read_text().startswith("LANG=C.UTF-8\n")
    proc = dlrun("images", "verify", "cpu-reference", "--engine", "charliecloud", env=cpu_reference["env"])
    assert proc.returncode == 0, proc.stderr
    # The archive holds the same image: its config digest is the lock's digest.
    from dlrun.images.archive import read_docker_archive

    assert read_docker_archive(cpu_reference["archive"]).image_id == entry["digest"]
    print(f"\ncpu-reference: build {cpu_reference['build_seconds']} s, archive "
          f"{cpu_reference['archive'].stat().st_size / 1e9:.2f} GB, digest {entry['digest']}")


def test_dataset_is_read_only_under_both_runtimes(cpu_reference_in_podman, dataset, monkeypatch):
    """The runtimes' own wrapped commands, with a probe as the rank command."""
    from dlrun.catalog import load_catalog
    from dlrun.probe.host import probe_host
    from dlrun.images.verify import with_local_image
    from dlrun.plan import resolve_plan
    from dlrun.job import RankCommand
    from dlrun.shell import join
    from dlrun.registry import RUNTIMES

    env = {**os.environ, **cpu_reference_in_podman["env"], "DLRUN_RUN_DIR": str(dataset.parent)}
    probe = RankCommand(argv=["sh", "-c", "cat /data/README && if touch /data/x 2>/dev/null; then echo WRITABLE; "
                                          "else echo READ-ONLY; fi"], env={})
    for key, value in cpu_reference_in_podman["env"].items():  # the plan reads the lock and store from here
        monkeypatch.setenv(key, value)
    for runtime in ("charliecloud", "docker-api"):
        plan = resolve_plan(load_catalog(host=probe_host()), "trivial", image="cpu-reference", runtime=runtime,
                            data=str(dataset), local_image=with_local_image)
        argv = RUNTIMES.get(runtime).wrap(plan, probe).argv
        proc = subprocess.run(["bash", "-c", join(argv)], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, f"{runtime}: {proc.stderr}"
        assert proc.stdout.splitlines() == ["read-only dataset", "READ-ONLY"], (runtime, proc.stdout, proc.stderr)
        assert not (dataset / "x").exists()


@pytest.mark.parametrize("runtime", ["charliecloud", "docker-api"])
def test_harness_runs_in_the_image_and_the_result_holds_its_digest(cpu_reference_in_podman, run_home,
                                                                    runtime, tmp_path):
    env = {**cpu_reference_in_podman["env"], **run_home}
    # Real data, as TFRecord shards: the image's Pillow decodes them and its crc32c checks them
    dataset = tmp_path / "imagenet-mini"
    made = dlrun("data", "synth", "--format", "tfrecord", "--images", "64", "--classes", "4", "--size", "64",
                 str(dataset), env=env)
    assert made.returncode == 0, made.stderr
    proc = dlrun("run", "trivial", "--image", "cpu-reference", "--runtime", runtime, "--data", str(dataset),
                 "--steps", "20", "--warmup-steps", "3", "--batch-size", "4", env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = stored_run(env)
    digest = cpu_reference_in_podman["entry"]["digest"]
    assert run["status"] == "ok" and run["runtime"] == runtime and run["image"] == "cpu-reference"
    assert run["image_digest"] == digest and run["provenance"]["image_digest"] == digest
    check = run["provenance"]["image_check"]
    assert check["verified"] is True
    if runtime == "charliecloud":
        assert check == {**check, "field": "rootfs", "digest": cpu_reference_in_podman["entry"]["rootfs"]}
    else:
        assert check == {**check, "field": "digest", "digest": digest}
    assert run["plan"]["data"] == {"path": str(dataset), "format": "tfrecord", "staged_copy": None, "mount": "/data"}
    assert run["plan"]["binds"] == []  # the dataset is the plan's data, which the runtime binds at /data
    result = run["results"][0]
    assert result["unit"] == "images/sec" and result["value"] > 0
    assert (result["extra"]["data_source"], result["extra"]["data_path"]) == ("tfrecord", "/data")
    assert result["extra"]["images_decoded"] > 0
    assert result["extra"]["framework_version"] == "1.13.0a0"  # Debian's torch 1.13.1 as it reports itself
    # the image carries tcmalloc and the harness preloaded it inside the container
    assert result["extra"]["allocator"] == "tcmalloc"
    library = result["extra"]["allocator_library"]
    assert library.startswith("/usr/lib/") and "/libtcmalloc_minimal.so.4" in library
    print(f"\n{runtime}: trivial {result['value']:.1f} images/sec")


def test_run_refuses_an_image_whose_digest_differs(cpu_reference_in_podman, run_home, tmp_path):
    lock = yaml.safe_load(Path(cpu_reference_in_podman["env"]["DLRUN_IMAGES_LOCK"]).read_text())
    other = "sha256:" + "f" * 64
    arch = cpu_reference_in_podman["arch"]
    lock["images"]["cpu-reference"][arch]["digest"] = other
    (tmp_path / "images.lock").write_text(yaml.safe_dump(lock))
    env = {**cpu_reference_in_podman["env"], **run_home, "DLRUN_IMAGES_LOCK": str(tmp_path / "images.lock")}
    proc = dlrun("run", "trivial", "--image", "cpu-reference", "--runtime", "docker-api", "--steps", "2", env=env)
    assert proc.returncode == 1
    assert f"images.lock records {other}, but localhost/dlrun/cpu-reference:{arch}" in proc.stderr
    assert cpu_reference_in_podman["entry"]["digest"] in proc.stderr
    assert not list(Path(run_home["DLRUN_HOME"]).glob("runs/*")), "nothing may run"


def test_share_through_an_archive(cpu_reference_in_podman, tmp_path):
    """Site A saves (from Podman through the Docker API, and from its own store); site B loads the archive
    for Charliecloud and verifies it against the same lock."""
    env = cpu_reference_in_podman["env"]
    entry = cpu_reference_in_podman["entry"]
    saved = tmp_path / "cpu-reference.tar"
    proc = dlrun("images", "save", "cpu-reference", "--engine", "podman", "-o", str(saved), env=env)
    assert proc.returncode == 0, proc.stderr
    from dlrun.images.archive import read_docker_archive

    assert read_docker_archive(saved).image_id == entry["digest"]  # Podman kept the image ID
    saved.unlink()
    proc = dlrun("images", "save", "cpu-reference", "--engine", "charliecloud", "-o", str(saved), env=env)
    assert proc.returncode == 0, proc.stderr
    site_b = {**env, "DLRUN_IMAGES_DIR": str(tmp_path / "site-b")}
    proc = dlrun("images", "load", str(saved), "--engine", "charliecloud", env=site_b)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rootfs"] == entry["rootfs"]
    proc = dlrun("images", "verify", "cpu-reference", "--engine", "charliecloud", env=site_b)
    assert proc.returncode == 0, proc.stderr
    # A damaged copy is refused, showing both digests.
    rootfs = tmp_path / "site-b" / "cpu-reference" / cpu_reference_in_podman["arch"] / "rootfs"
    (rootfs / "opt" / "dlrun" / "harness_pytorch.py").write_text("print('not the harness')\n")
    proc = dlrun("images", "verify", "cpu-reference", "--engine", "charliecloud", env=site_b)
    assert proc.returncode == 1
    assert f"images.lock records {entry['rootfs']}, but {rootfs} has sha256:" in proc.stderr


# ------------------------------------------------------------------------------------------------ recipe builds
# Debian's ch-image runs `python3` from PATH and needs Debian's python3-lark: a virtual environment's or
# pyenv's python3 ahead of /usr/bin lacks it.
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def site_spec_without_debootstrap(site: Path, arch: str) -> str:
    """cpu-reference as a site's own image under another name, built from its Dockerfile (no `debootstrap:`
    section, so Charliecloud builds it with ch-image too)."""
    spec = yaml.safe_load((REPO / "containers" / "cpu-reference" / "image.yaml").read_text())
    spec.pop("debootstrap")
    spec.update(name="cpu-built", uri="localhost/dlrun-test/cpu-built", arch=[arch],
                base={arch: spec["base"][arch]})
    folder = site / "containers" / "cpu-built"
    folder.mkdir(parents=True)
    (folder / "image.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return spec["base"][arch]["image"] + ":" + spec["base"][arch]["tag"]


def import_base(engine: str, base_rootfs: Path, reference: str, env: dict[str, str]) -> bool:
    """Give the engine the recipe's base image (no registry is reachable here): the bootstrapped Debian tree
    of cpu-reference, whose pinned packages the recipe's `apt-get install` then finds in place. True when
    this test created it (and removes it again)."""
    run_env = {**os.environ, **env}
    if engine == "charliecloud":
        Path(env["CH_IMAGE_STORAGE"]).parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["ch-image", "import", str(base_rootfs), reference], capture_output=True, text=True,
                              env=run_env, timeout=900)
        assert proc.returncode == 0, proc.stderr
        return False  # in the test's own ch-image storage, removed with it
    qualified = f"docker.io/{reference}"
    if subprocess.run([engine, "image", "inspect", qualified], capture_output=True, env=run_env).returncode == 0:
        return False
    proc = subprocess.run(f"tar -C {base_rootfs} -c . | {engine} import - {qualified}", shell=True, capture_output=True,
                          text=True, env=run_env, timeout=900)
    assert proc.returncode == 0, proc.stderr
    return True


@pytest.mark.parametrize("engine,runtime", [("charliecloud", "charliecloud"), ("podman", "docker-api"),
                                            ("docker", "docker")])
def test_recipe_builds_from_the_assembled_context_and_runs(cpu_reference, request, monkeypatch, tmp_path,
                                                          engine, runtime):
    """The committed kind of recipe, built for real by ch-image, by Podman and by a private dockerd (both through
    the Docker API) from the context dlrun assembles out of the installed package; the lock records it and the
    harness runs in it."""
    from dlrun import paths
    from dlrun.images import debootstrap
    from dlrun.images.spec import get_spec

    require_tools("ch-image", "podman")
    arch = cpu_reference["arch"]
    monkeypatch.setenv("DLRUN_CACHE_DIR", cpu_reference["env"]["DLRUN_CACHE_DIR"])
    base_rootfs = debootstrap.base_dir(get_spec("cpu-reference").spec, arch) / "rootfs"
    base = site_spec_without_debootstrap(tmp_path / "site", arch)
    env = {"DLRUN_PATH": str(tmp_path / "site"), "DLRUN_CACHE_DIR": str(tmp_path / "cache"),
           "DLRUN_IMAGES_DIR": str(tmp_path / "store"), "DLRUN_IMAGES_LOCK": str(tmp_path / "images.lock"),
           "DLRUN_HOME": str(tmp_path / "home"), "PATH": SYSTEM_PATH, "USER": cpu_reference["env"]["USER"]}
    monkeypatch.delenv("CH_IMAGE_STORAGE", raising=False)  # dlrun's own choice, under DLRUN_CACHE_DIR
    if engine == "podman":
        env.update(request.getfixturevalue("podman_service")["env"])
    if engine == "docker":
        env.update(request.getfixturevalue("dockerd").env)
    assert dlrun("images", "render", "cpu-built", env=env).returncode == 0
    env_for_tools = {**env, "CH_IMAGE_STORAGE": str(tmp_path / "cache" / "ch-image")}
    created_base = import_base(engine, base_rootfs, base, env_for_tools)
    try:
        proc = dlrun("images", "build", "cpu-built", "--engine", engine, env=env, timeout=1800)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        entry = json.loads(proc.stdout)
        assert entry["recorded_by"] == f"build ({engine})"
        assert entry["rootfs" if engine == "charliecloud" else "digest"].startswith("sha256:")
        contexts = list((tmp_path / "cache" / "build-contexts").iterdir())
        assert [c.name.startswith(f"cpu-built-{arch}-") for c in contexts] == [True]
        spec = get_spec("cpu-reference").spec
        for name in spec.harness.files:
            copied = contexts[0] / "launcher" / "dlrun" / "harness" / name
            assert copied.read_bytes() == (paths.HARNESS_DIR / name).read_bytes()
            if engine == "charliecloud":
                built = tmp_path / "store" / "cpu-built" / arch / "rootfs" / spec.harness_dir.strip("/") / name
                assert built.read_bytes() == copied.read_bytes()
        proc = dlrun("images", "verify", "cpu-built", "--engine", engine, env=env)
        assert proc.returncode == 0, proc.stderr
        proc = dlrun("run", "trivial", "--image", "cpu-built", "--runtime", runtime,
                     "--steps", "3", "--warmup-steps", "1", env=env, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        run = stored_run(env)
        assert run["status"] == "ok" and run["image"] == "cpu-built"
        check = run["provenance"]["image_check"]
        assert check["verified"] is True and check["digest"] == entry[check["field"]]
    finally:
        if engine in ("podman", "docker"):
            names = ["localhost/dlrun-test/cpu-built:" + arch] + ([f"docker.io/{base}"] if created_base else [])
            subprocess.run([engine, "rmi", "--force", *names], capture_output=True, env={**os.environ, **env})
        for big in ("cache", "store"):  # ch-image's storage and the unpacked image hold GBs
            shutil.rmtree(tmp_path / big, ignore_errors=True)
