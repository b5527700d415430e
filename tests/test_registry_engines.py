"""Pushes and pulls through the loopback registry for every engine that runs here, with the tiny image of
each architecture (fixtures_registry): Podman (the Docker API of `podman system service`), Charliecloud
(`ch-image push` of the verified root filesystem, `ch-image pull` of the architecture's manifest by
digest), skopeo reading what each left; and enroot, which cannot run here, through a stand-in `enroot` that
records its command line: the registry is resolved for real and the import names the manifest by digest
in the form enroot's own `docker://` parser takes."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from fixtures_images import CONTAINERS_CONF, dlrun, require_tools
from fixtures_registry import tiny_site_spec

pytestmark = pytest.mark.containers
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # Debian's ch-image needs Debian's python3 (python3-lark)


def ok(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout[proc.stdout.index("{"):]) if "{" in proc.stdout else {}


def skopeo_raw(reference: str) -> dict:
    return json.loads(subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--raw", f"docker://{reference}"],
                                     capture_output=True, text=True, check=True).stdout)


def site(root: Path, **extra: str) -> dict[str, str]:
    tiny_site_spec(root / "catalog")
    return {"DLRUN_PATH": str(root / "catalog"), "DLRUN_HOME": str(root / "home"),
            "DLRUN_IMAGES_DIR": str(root / "store"), "DLRUN_CACHE_DIR": str(root / "cache"),
            "DLRUN_IMAGES_LOCK": str(root / "images.lock"), "USER": os.environ.get("USER") or "root", **extra}


@pytest.fixture(scope="module")
def podman_registry_service(registry, tmp_path_factory):
    """Podman's Docker API with the loopback registry listed as one whose certificate is not verified (Podman,
    unlike Docker, verifies a loopback registry's certificate unless registries.conf says otherwise)."""
    require_tools("podman")
    work = tmp_path_factory.mktemp("podman-registry")
    (work / "containers.conf").write_text(CONTAINERS_CONF)
    (work / "registries.conf").write_text(f'[[registry]]\nlocation = "{registry["address"]}"\ninsecure = true\n')
    sock = work / "podman.sock"
    env = {"CONTAINERS_CONF": str(work / "containers.conf"), "CONTAINERS_REGISTRIES_CONF": str(work / "registries.conf"),
           "DOCKER_HOST": f"unix://{sock}"}
    with open(work / "service.log", "w") as log:
        proc = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{sock}"], stdout=log,
                                stderr=subprocess.STDOUT, env={**os.environ, **env}, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not sock.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"podman system service did not start: {(work / 'service.log').read_text()}",
                            pytrace=False)
            time.sleep(0.2)
        yield env
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_podman_pushes_every_architecture_under_one_tag_and_pulls_its_own(registry, tiny_images,
                                                                          podman_registry_service, tmp_path):
    a = site(tmp_path / "a", **podman_registry_service)
    b = site(tmp_path / "b", **podman_registry_service)
    tag = f"{registry['address']}/site-p/tiny:1"
    for arch in ("x86_64", "ppc64le"):
        ok(dlrun("images", "load", str(tiny_images[arch][0]), "tiny", "--arch", arch, "--engine", "podman", env=a))
        pushed = ok(dlrun("images", "push", "tiny", "--arch", arch, "--engine", "podman", "--to", tag, env=a))
        assert pushed["digest"] == tiny_images[arch][1]  # Podman pushed the very image it loaded
    raw = skopeo_raw(tag)
    assert sorted(m["platform"]["architecture"] for m in raw["manifests"]) == ["amd64", "ppc64le"]
    got = ok(dlrun("images", "pull", "tiny", "--arch", "x86_64", "--engine", "podman", "--from", tag, "--digest",
                   tiny_images["x86_64"][1], env=b))
    [amd64] = [m["digest"] for m in raw["manifests"] if m["platform"]["architecture"] == "amd64"]
    assert got["digest"] == tiny_images["x86_64"][1]
    assert got["repo_digests"] == [f"{tag.rsplit(':', 1)[0]}@{amd64}"] and len(got["index_digests"]) == 1


def test_charliecloud_pulls_its_architecture_by_digest(registry, tiny_images, podman_registry_service, tmp_path):
    """ch-image pulls the architecture's manifest of an index (pushed by Podman) by digest; the root filesystem
    is the one the same archive unpacks to. Its push takes only images ch-image built or pulled (0.31 asserts
    on one without history): a bootstrapped one is refused in one line, naming the engines that push it."""
    require_tools("ch-image", "ch-convert")
    a = site(tmp_path / "a", **podman_registry_service)
    b, c = site(tmp_path / "b", PATH=SYSTEM_PATH), site(tmp_path / "c", PATH=SYSTEM_PATH)
    tag = f"{registry['address']}/site-ch/tiny:1"
    for arch in ("x86_64", "ppc64le"):
        ok(dlrun("images", "load", str(tiny_images[arch][0]), "tiny", "--arch", arch, "--engine", "podman", env=a))
        ok(dlrun("images", "push", "tiny", "--arch", arch, "--engine", "podman", "--to", tag, env=a))
    [amd64] = [m["digest"] for m in skopeo_raw(tag)["manifests"] if m["platform"]["architecture"] == "amd64"]
    got = ok(dlrun("images", "pull", "tiny", "--arch", "x86_64", "--engine", "charliecloud", "--from", tag,
                   "--digest", tiny_images["x86_64"][1], env=b, timeout=600))
    rootfs = tmp_path / "b" / "store" / "tiny" / "x86_64" / "rootfs"
    assert (rootfs / "etc" / "dlrun-tiny").read_text() == "dlrun tiny image for x86_64\n"
    assert got["digest"] == tiny_images["x86_64"][1]
    assert got["repo_digests"] == [f"{tag.rsplit(':', 1)[0]}@{amd64}"] and len(got["index_digests"]) == 1
    loaded = ok(dlrun("images", "load", str(tiny_images["x86_64"][0]), "tiny", "--arch", "x86_64", "--engine",
                      "charliecloud", env=c))
    # the archive's tree is all there, file for file; ch-image adds its own (ch/metadata.json, mount points), so
    # the lock records the tree it pulled, which the verify below holds it to
    unpacked = tmp_path / "c" / "store" / "tiny" / "x86_64" / "rootfs"
    for path in unpacked.rglob("*"):
        twin = rootfs / path.relative_to(unpacked)
        assert twin.exists() and (not path.is_file() or twin.read_bytes() == path.read_bytes()), path
    assert got["rootfs"] != loaded["rootfs"] and got["rootfs"].startswith("sha256:")
    assert ok(dlrun("images", "verify", "tiny", "--arch", "x86_64", "--engine", "charliecloud", env=b))["rootfs"] == \
        got["rootfs"]
    proc = dlrun("images", "push", "tiny", "--arch", "x86_64", "--engine", "charliecloud", "--to", tag, env=c)
    assert proc.returncode == 2 and "ch-image pushes only images it built or pulled" in proc.stderr, proc.stderr


# enroot's parser of `docker://` references (src/docker.sh of NVIDIA/enroot, `docker::import`): the forms
# with a registry before `#`, and a tag or a digest.
ENROOT_IMAGE, ENROOT_TAG, ENROOT_DIGEST = r"[a-z0-9/._-]+", r"[A-Za-z0-9._:-]+", r"sha256:[A-Za-z0-9]+"
ENROOT_FORMS = [rf"^docker://([^#/@]+)#({ENROOT_IMAGE})@({ENROOT_DIGEST})$",
                rf"^docker://([^#/@]+)#({ENROOT_IMAGE})(:({ENROOT_TAG}))?$"]
STAND_IN = """#!/bin/sh
# records enroot's command line; writes a squashfs-looking file where `-o` points
printf '%s\\n' "$@" > "{record}"
while [ $# -gt 0 ]; do [ "$1" = -o ] && {{ printf 'hsqs%s' "$*" > "$2"; }}; shift; done
"""


def test_enroot_imports_the_resolved_manifest_by_digest(registry, tiny_images, podman_registry_service, tmp_path):
    """enroot cannot run here: a stand-in takes its place on PATH, the registry is real."""
    a = site(tmp_path / "a", **podman_registry_service)
    tag = f"{registry['address']}/site-e/tiny:1"
    ok(dlrun("images", "load", str(tiny_images["x86_64"][0]), "tiny", "--arch", "x86_64", "--engine", "podman", env=a))
    ok(dlrun("images", "push", "tiny", "--arch", "x86_64", "--engine", "podman", "--to", tag, env=a))
    [amd64] = [m["digest"] for m in skopeo_raw(tag)["manifests"]]
    bin_dir, record = tmp_path / "bin", tmp_path / "enroot-argv"
    bin_dir.mkdir()
    (bin_dir / "enroot").write_text(STAND_IN.format(record=record))
    (bin_dir / "enroot").chmod(0o755)
    b = site(tmp_path / "b", PATH=f"{bin_dir}:{os.environ['PATH']}")
    got = ok(dlrun("images", "pull", "tiny", "--arch", "x86_64", "--engine", "enroot", "--from", tag, env=b))
    sqsh = tmp_path / "b" / "store" / "tiny" / "x86_64" / "tiny.sqsh"
    uri = f"docker://{registry['address']}#site-e/tiny@{amd64}"
    assert record.read_text().splitlines() == ["import", "--arch", "x86_64", "-o", str(sqsh), uri]
    assert re.match(ENROOT_FORMS[0], uri) and not re.match(ENROOT_FORMS[1], uri)  # the digest form, as parsed
    assert got["digest"] == tiny_images["x86_64"][1] and got["squashfs"].startswith("sha256:")
    assert got["repo_digests"] == [f"{registry['address']}/site-e/tiny@{amd64}"]
    lock = yaml.safe_load(Path(b["DLRUN_IMAGES_LOCK"]).read_text())["images"]["tiny"]["x86_64"]
    assert lock["index_digests"] == got["index_digests"] and len(got["index_digests"]) == 1
    # a lock that names another image: refused before enroot runs, both image IDs named
    record.unlink()
    other = "sha256:" + "3" * 64
    lock["digest"] = other
    other_lock = tmp_path / "other.lock"
    other_lock.write_text(yaml.safe_dump({"version": 1, "images": {"tiny": {"x86_64": lock}}}))
    proc = dlrun("images", "pull", "tiny", "--arch", "x86_64", "--engine", "enroot", "--from", tag,
                 env={**b, "DLRUN_IMAGES_LOCK": str(other_lock)})
    assert proc.returncode == 1 and other in proc.stderr and tiny_images["x86_64"][1] in proc.stderr, proc.stderr
    assert not record.exists(), "enroot ran for an image the lock does not name"
