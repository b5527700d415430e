"""Images in plans and runs: bind the lock's digest and this machine's copies to the plan's image, and
refuse to run an image whose content differs from the lock."""
from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dlrun.catalog.models import ImageSpec
from dlrun.errors import DlrunError

# The last check per (image, arch, runtime) in this process, for the run's provenance.
_CHECKED: dict[tuple[str, str, str], dict[str, Any]] = {}


def with_local_image(image: ImageSpec, arch: str) -> ImageSpec:
    """The image as this machine has it for `arch`: digest and repo digest from images.lock, paths of the
    unpacked root filesystem and the SIF in the image store, and the squashfs file when the lock records
    one (enroot runs it instead of pulling the registry reference)."""
    if image.kind != "container":
        return image
    from dlrun.images import lock
    from dlrun.images.spec import rootfs_path, sif_path, squashfs_path

    entry = lock.entry(image.name, arch) or {}
    repo = sorted(entry.get("repo_digests") or [])
    squashfs = str(squashfs_path(image.name, arch)) if entry.get("squashfs") else None
    return image.model_copy(update={
        "digest": entry.get("digest") or image.digest,
        "repo_digest": repo[0] if repo else image.repo_digest,
        "rootfs": image.rootfs or str(rootfs_path(image.name, arch)),
        "sif": image.sif or str(sif_path(image.name, arch)),
        "squashfs": image.squashfs or squashfs,
    })


def _cli_image_id(engine: str, reference: str) -> str | None:
    if shutil.which(engine) is None:
        raise DlrunError(f"{engine} is not installed (not on PATH); install it, or choose another --runtime")
    proc = subprocess.run([engine, "image", "inspect", "--format", "{{.Id}}", reference], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    found = proc.stdout.strip()
    return found if found.startswith("sha256:") else f"sha256:{found}"


def _file(path: str | None, what: str, how: str) -> tuple[str, str]:
    """(digest, path) of an image file (sha256) or root filesystem (tree digest) the runtime will use."""
    from dlrun.images.digest import file_sha256, tree_digest

    if not path or not os.path.exists(path):
        raise DlrunError(f"{path} does not exist; build, pull or load the {what} first: {how}")
    return (tree_digest(path) if os.path.isdir(path) else file_sha256(path)), path  # type: ignore[arg-type]


def _in_engine(reference: str, where: str, actual: str | None, image: ImageSpec, arch: str) -> tuple[str, str]:
    if actual is None:
        raise DlrunError(f"image {reference} is not in {where}; load it first: "
                         f"dlrun images load {image.name}_{arch}.tar {image.name} --engine ...")
    return actual, f"{reference} in {where}"


def _api_image(image: ImageSpec, arch: str) -> tuple[str, str]:
    """The image ID the Docker API ($DOCKER_HOST: Docker, or Podman's service) has for the plan's tag."""
    from dlrun.images import docker_api

    reference = f"{image.uri}:{arch}"
    return _in_engine(reference, f"the Docker API at {docker_api.endpoint('docker')}",
                      docker_api.image_id(docker_api.client("docker"), reference), image, arch)


def _cli_image(engine: str) -> Callable[[ImageSpec, str], tuple[str, str]]:
    """The image ID the `docker`/`podman` CLI (what those runtimes run) has for the plan's tag."""
    def digest(image: ImageSpec, arch: str) -> tuple[str, str]:
        reference = f"{image.uri}:{arch}"
        return _in_engine(reference, engine, _cli_image_id(engine, reference), image, arch)
    return digest


@dataclass(frozen=True)
class Check:
    """How a runtime's copy of the image is compared with the lock."""

    field: str          #: the lock field compared
    tool: str | None    #: the program the runtime runs (checked on a local run)
    digest: Callable[[ImageSpec, str], tuple[str, str]]  #: (digest of the copy, where it is)


CHECKS = {
    "docker-api": Check("digest", None, _api_image),
    "docker": Check("digest", "docker", _cli_image("docker")),
    "podman": Check("digest", "podman", _cli_image("podman")),
    "charliecloud": Check("rootfs", "ch-run", lambda image, arch: _file(
        image.rootfs, "root filesystem", f"dlrun images build {image.name} --engine charliecloud")),
    "singularity": Check("sif", None, lambda image, arch: _file(
        image.sif, "SIF", f"dlrun images pull {image.name} --from ... --engine singularity")),
    "apptainer": Check("sif", None, lambda image, arch: _file(
        image.sif, "SIF", f"dlrun images pull {image.name} --from ... --engine apptainer")),
    # only when the lock records a squashfs file (see _check_for): else pyxis pulls the registry reference
    "enroot": Check("squashfs", None, lambda image, arch: _file(
        image.squashfs, "squashfs file", f"dlrun images pull {image.name} --from ... --engine enroot")),
}


def _check_for(plan) -> Check | None:
    if plan.runtime == "enroot" and not plan.image.squashfs:
        return None
    return CHECKS.get(plan.runtime)


def verify_plan_image(plan, skip_checks: bool = False) -> dict[str, Any]:
    """Check the plan's image on this machine against images.lock before a run; return provenance.

    Refuses (exit 1, both digests) when the copy the runtime will use differs from the lock, and when a
    container image has no digest in the lock at all: a run must record the digest it ran. With
    `skip_checks` (a submit host whose site lock lives elsewhere) an image without a digest here runs, and
    the run records that nothing was verified (its comparability key's image digest is then unknown)."""
    image = plan.image
    if image.kind != "container":
        return {}
    from dlrun.images import lock
    from dlrun.images.engines.base import mismatch

    arch = plan.system.arch
    entry = lock.entry(image.name, arch) or {}
    check = _check_for(plan)
    key = (image.name, arch, plan.runtime)
    unrecorded = not entry.get("digest") and not (check and check.field != "digest" and entry.get(check.field))
    if skip_checks and (unrecorded or (check is not None and not entry.get(check.field))):
        _CHECKED[key] = {"image_check": {"runtime": plan.runtime, "verified": False,
                                         "reason": f"--skip-checks: {lock.lock_path()} on this host has no digest "
                                                   f"of {image.name} ({arch})"}}
        return _CHECKED[key]
    if unrecorded:
        raise DlrunError(f"image {image.name} ({arch}) has no digest in {lock.lock_path()}, so the run could not "
                         f"record what it ran; build, pull or load it first (dlrun images build {image.name} --engine "
                         "...), or record the copy you have: dlrun images lock " + image.name + " --engine ...")
    if check and check.tool and plan.scheduler == "local" and shutil.which(check.tool) is None:
        from dlrun.images.steps import TOOLS

        raise DlrunError(f"runtime {plan.runtime} needs {check.tool}, which is not installed (not on PATH); "
                         f"{TOOLS[check.tool].install}")
    if check is None:
        _CHECKED[key] = {"image_check": {"runtime": plan.runtime, "verified": False,
                                         "reason": f"runtime {plan.runtime} has no digest check in dlrun"}}
        return _CHECKED[key]
    actual, where = check.digest(image, arch)
    expected = entry.get(check.field)
    if not expected:
        raise DlrunError(f"images.lock has no {check.field} digest for {image.name} ({arch}); record it: "
                         f"dlrun images lock {image.name} --engine ...")
    if actual != expected:
        raise mismatch(image.name, arch, f"runtime {plan.runtime}", expected, actual, where)
    _CHECKED[key] = {"image_check": {"runtime": plan.runtime, "verified": True, "field": check.field,
                                     "digest": actual, "artifact": where}}
    return _CHECKED[key]


def image_provenance(plan) -> dict[str, Any]:
    """What the pre-run check found for this plan's image (empty when it was not checked)."""
    if plan.image.kind != "container":
        return {}
    return _CHECKED.get((plan.image.name, plan.system.arch, plan.runtime), {})
