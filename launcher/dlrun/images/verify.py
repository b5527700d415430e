"""Images in plans and runs: bind the lock's digest and this machine's copies to the plan's image, and
refuse to run an image whose content differs from the lock."""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

from dlrun.catalog.models import ImageSpec
from dlrun.errors import DlrunError

# The last check per (image, arch, runtime) in this process, for the run's provenance.
_CHECKED: dict[tuple[str, str, str], dict[str, Any]] = {}

# runtime -> how its copy of the image is checked
CHECKS = {"docker-api": "docker-api", "docker": "docker-cli", "podman": "podman-cli", "charliecloud": "rootfs",
          "singularity": "sif", "apptainer": "sif"}


def with_local_image(image: ImageSpec, arch: str) -> ImageSpec:
    """The image as this machine has it for `arch`: digest and repo digest from images.lock, paths of the
    unpacked root filesystem and the SIF in the image store."""
    if image.kind != "container":
        return image
    from dlrun.images import lock
    from dlrun.images.spec import rootfs_path, sif_path

    entry = lock.entry(image.name, arch) or {}
    repo = sorted(entry.get("repo_digests") or [])
    return image.model_copy(update={
        "digest": entry.get("digest") or image.digest,
        "repo_digest": repo[0] if repo else image.repo_digest,
        "rootfs": image.rootfs or str(rootfs_path(image.name, arch)),
        "sif": image.sif or str(sif_path(image.name, arch)),
    })


def _cli_image_id(engine: str, reference: str) -> str | None:
    if shutil.which(engine) is None:
        raise DlrunError(f"{engine} is not installed (not on PATH); install it, or choose another --runtime")
    proc = subprocess.run([engine, "image", "inspect", "--format", "{{.Id}}", reference], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    found = proc.stdout.strip()
    return found if found.startswith("sha256:") else f"sha256:{found}"


def verify_plan_image(plan) -> dict[str, Any]:
    """Check the plan's image on this machine against images.lock before a run; return provenance.

    Refuses (exit 1, both digests) when the copy the runtime will use differs from the lock, and when a
    container image has no digest in the lock at all: a run must record the digest it ran."""
    image = plan.image
    if image.kind != "container":
        return {}
    from dlrun.images import lock
    from dlrun.images.digest import file_sha256, tree_digest
    from dlrun.images.ops import mismatch

    arch = plan.system.arch
    entry = lock.entry(image.name, arch) or {}
    check = CHECKS.get(plan.runtime)
    if not entry.get("digest") and not (check == "sif" and entry.get("sif")):
        raise DlrunError(f"image {image.name} ({arch}) has no digest in {lock.lock_path()}, so the run could not "
                         f"record what it ran; build, pull or load it first (dlrun images build {image.name} --engine "
                         "...), or record the copy you have: dlrun images lock " + image.name + " --engine ...")
    key = (image.name, arch, plan.runtime)
    tool = {"rootfs": "ch-run", "docker-cli": "docker", "podman-cli": "podman"}.get(check or "")
    if tool and plan.scheduler == "local" and shutil.which(tool) is None:
        from dlrun.images.steps import INSTALL_HINTS

        raise DlrunError(f"runtime {plan.runtime} needs {tool}, which is not installed (not on PATH); "
                         f"{INSTALL_HINTS[tool]}")
    if check is None:
        _CHECKED[key] = {"image_check": {"runtime": plan.runtime, "verified": False,
                                         "reason": f"runtime {plan.runtime} has no digest check in dlrun"}}
        return _CHECKED[key]
    if check == "rootfs":
        field, where = "rootfs", image.rootfs
        if not where or not os.path.isdir(where):
            raise DlrunError(f"{where} does not exist; build or load the image for Charliecloud: "
                             f"dlrun images build {image.name} --engine charliecloud")
        actual = tree_digest(where)  # type: ignore[arg-type]
    elif check == "sif":
        field, where = "sif", image.sif
        if not where or not os.path.exists(where):
            raise DlrunError(f"{where} does not exist; build, pull or load the SIF first")
        actual = file_sha256(where)  # type: ignore[arg-type]
    else:
        field = "digest"
        if check == "docker-api":
            from dlrun.images import docker_api

            api = docker_api.client("docker")
            where = f"{image.uri}:{arch} at {docker_api.endpoint('docker')}"
            actual = docker_api.image_id(api, f"{image.uri}:{arch}")
        else:
            engine = check.split("-")[0]
            where = f"{image.uri}:{arch} in {engine}"
            actual = _cli_image_id(engine, f"{image.uri}:{arch}")
        if actual is None:
            raise DlrunError(f"image {image.uri}:{arch} is not in {where.split(' ', 1)[1]}; load it first: "
                             f"dlrun images load {image.name}_{arch}.tar {image.name} --engine ...")
    expected = entry.get(field)
    if not expected:
        raise DlrunError(f"images.lock has no {field} digest for {image.name} ({arch}); record it: "
                         f"dlrun images lock {image.name} --engine ...")
    if actual != expected:
        raise mismatch(image.name, arch, f"runtime {plan.runtime}", expected, actual, str(where))
    _CHECKED[key] = {"image_check": {"runtime": plan.runtime, "verified": True, "field": field, "digest": actual,
                                     "artifact": str(where)}}
    return _CHECKED[key]


def image_provenance(plan) -> dict[str, Any]:
    """What the pre-run check found for this plan's image (empty when it was not checked)."""
    if plan.image.kind != "container":
        return {}
    return _CHECKED.get((plan.image.name, plan.system.arch, plan.runtime), {})
