"""cpu-reference for real: built with debootstrap, run under Charliecloud (ch-run) and under Podman driven
through the Docker API (docker-py against `podman system service`), with a dataset bound read-only, and
shared between two image stores through a Docker archive. Every run lands in the result store with the
image digest in its provenance."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from dlrun.paths import harness_files
from fixtures_images import dlrun

pytestmark = pytest.mark.integration


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
                            data_dir=str(dataset), local_image=with_local_image)
        argv = RUNTIMES.get(runtime).wrap(plan, probe).argv
        proc = subprocess.run(["bash", "-c", join(argv)], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, f"{runtime}: {proc.stderr}"
        assert proc.stdout.splitlines() == ["read-only dataset", "READ-ONLY"], (runtime, proc.stdout, proc.stderr)
        assert not (dataset / "x").exists()


@pytest.mark.parametrize("runtime", ["charliecloud", "docker-api"])
def test_harness_runs_in_the_image_and_the_result_holds_its_digest(cpu_reference_in_podman, dataset, run_home,
                                                                    runtime):
    env = {**cpu_reference_in_podman["env"], **run_home}
    proc = dlrun("run", "trivial", "--image", "cpu-reference", "--runtime", runtime, "--data", str(dataset),
                 "--steps", "20", "--warmup-steps", "3", env=env, timeout=900)
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
    assert run["plan"]["binds"] == [{"source": str(dataset.resolve()), "target": "/data", "read_only": True}]
    result = run["results"][0]
    assert result["unit"] == "images/sec" and result["value"] > 0
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
