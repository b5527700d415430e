"""Images in plans and runs: bind the lock's digest and this machine's copies to the plan's image, and
refuse to run an image whose content differs from the lock.

The runtime says where its copy of the image is and how its digest is read (`Runtime.image_copy`, its
`service`); this module reads it and compares. What it found is returned to the caller, which hands it to
the run's record (dlrun.execute.prerun): nothing is kept here between calls.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

from dlrun.catalog.models import ImageSpec
from dlrun.errors import DlrunError
from dlrun.registry import RUNTIMES, SCHEDULERS
from dlrun.runtimes.base import ContainerService, ImageCopy, is_loopback_registry


def with_local_image(image: ImageSpec, arch: str) -> ImageSpec:
    """The image as this machine has it for `arch`: digest and repo digest from images.lock, paths of the
    unpacked root filesystem and the SIF in the image store, and the squashfs file when the lock records
    one, or when no registry but this machine's holds the image (enroot runs the file instead of pulling a
    reference the compute nodes cannot resolve)."""
    if image.kind != "container":
        return image
    from dlrun.images import lock
    from dlrun.images.spec import rootfs_path, sif_path, squashfs_path

    entry = lock.entry(image.name, arch) or {}
    repo = sorted(entry.get("repo_digests") or [])
    local_only = not repo and is_loopback_registry(f"{image.uri or image.name}:{arch}")
    squashfs = str(squashfs_path(image.name, arch)) if entry.get("squashfs") or local_only else None
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


def _in_service(copy: ImageCopy, service: ContainerService) -> tuple[str, str]:
    """(image ID, where) of the engine's image `copy.reference`: its CLI, or the Docker API at $DOCKER_HOST."""
    reference = str(copy.reference)
    if service.via_api:
        from dlrun.images import docker_api

        where = f"the Docker API at {docker_api.endpoint(service.engine)}"
        actual = docker_api.image_id(docker_api.client(service.engine), reference)
    else:
        where, actual = service.engine, _cli_image_id(service.engine, reference)
    if actual is None:
        raise DlrunError(f"image {reference} is not in {where}; load it first: {copy.how}")
    return actual, f"{reference} in {where}"


def copy_digest(copy: ImageCopy, service: ContainerService | None) -> tuple[str, str]:
    """(digest, where) of a runtime's copy: a file's sha256 or an unpacked tree's digest, or the image ID its
    engine service reports."""
    if copy.path is None and copy.reference is not None and service is not None:
        return _in_service(copy, service)
    from dlrun.images.digest import file_sha256, tree_digest

    path = copy.path
    if not path or not os.path.exists(path):
        raise DlrunError(f"{path} does not exist; build, pull or load the {copy.what} first: {copy.how}")
    return (tree_digest(path) if os.path.isdir(path) else file_sha256(path)), path  # type: ignore[arg-type]


def verify_plan_image(plan, skip_checks: bool = False) -> dict[str, Any]:
    """Check the plan's image on this machine against images.lock before a run; return what was found, for
    the run's provenance (`{"image_check": {...}}`; empty for an image that is no container).

    Refuses (exit 1, both digests) when the copy the runtime will use differs from the lock, and when a
    container image has no digest in the lock at all: a run must record the digest it ran. With
    `skip_checks` (a submit host whose site lock lives elsewhere) an image without a digest here runs, and
    the run records that nothing was verified (its comparability key's image digest is then unknown)."""
    image = plan.image
    if image.kind != "container":
        return {}
    from dlrun.images import lock
    from dlrun.images.engines.base import mismatch

    arch = plan.image_arch
    entry = lock.entry(image.name, arch) or {}
    runtime = RUNTIMES.get(plan.runtime)
    copy = runtime.image_copy(plan)
    unrecorded = not entry.get("digest") and not (copy.field not in (None, "digest") and entry.get(copy.field))
    if skip_checks and (unrecorded or (copy.field is not None and not entry.get(copy.field))):
        return {"image_check": {"runtime": plan.runtime, "verified": False,
                                "reason": f"--skip-checks: {lock.lock_path()} on this host has no digest of "
                                          f"{image.name} ({arch})"}}
    if unrecorded:
        raise DlrunError(f"image {image.name} ({arch}) has no digest in {lock.lock_path()}, so the run could not "
                         f"record what it ran; build, pull or load it first (dlrun images build {image.name} --engine "
                         "...), or record the copy you have: dlrun images lock " + image.name + " --engine ...")
    if copy.tool and SCHEDULERS.get(plan.scheduler).runs_here and shutil.which(copy.tool.command) is None:
        raise DlrunError(f"runtime {plan.runtime} needs {copy.tool.command}, which is not installed (not on PATH); "
                         f"install {copy.tool.install}")
    if copy.field is None:
        return {"image_check": {"runtime": plan.runtime, "verified": False, "reason": copy.why}}
    actual, where = copy_digest(copy, runtime.service)
    expected = entry.get(copy.field)
    if not expected:
        raise DlrunError(f"images.lock has no {copy.field} digest for {image.name} ({arch}); record it: "
                         f"dlrun images lock {image.name} --engine ...")
    if actual != expected:
        raise mismatch(image.name, arch, f"runtime {plan.runtime}", expected, actual, where)
    return {"image_check": {"runtime": plan.runtime, "verified": True, "field": copy.field, "digest": actual,
                            "artifact": where}}
