"""Checks of what the job needs from the node it runs on: enough GPUs, a container engine that answers, and
the plan's image present with its digest recorded. Batch jobs run elsewhere: from a submit host only the
image's recorded digest (and a SIF file, which lives on the shared filesystem) is checked here."""
from __future__ import annotations

import os
from typing import Any

from dlrun.errors import DlrunError
from dlrun.images import lock
from dlrun.images.verify import CHECKS
from dlrun.plan import Plan
from dlrun.preflight.findings import Finding
from dlrun.probe.daemons import engine_has_image, engine_status
from dlrun.registry import SCHEDULERS

#: Runtimes whose containers a service starts, and the engine to ask.
ENGINES = {"docker": "docker", "podman": "podman"}


def node_findings(plan: Plan, inventory: dict[str, Any]) -> list[Finding]:
    scheduler = SCHEDULERS.get(plan.scheduler)
    runs_here = not scheduler.batch and not scheduler.runs_image  # Kubernetes pods run in the cluster
    findings: list[Finding] = []
    engine_ok = True
    if runs_here:
        findings += gpu_findings(plan, inventory)
        engine = engine_findings(plan)
        engine_ok = not engine
        findings += engine
    return findings + image_findings(plan, runs_here=runs_here, engine_ok=engine_ok,
                                     pulled_by_scheduler=scheduler.runs_image)


def gpu_findings(plan: Plan, inventory: dict[str, Any]) -> list[Finding]:
    """One GPU per rank: a GPU plan on a node with fewer GPUs would fail or share GPUs between ranks."""
    if plan.device != "cuda":
        return []
    gpu = inventory.get("gpu") or {}
    have = len(gpu.get("gpus") or [])
    need = plan.ranks_per_node
    if have >= need:
        return [Finding("ok", "gpus", f"{need} rank(s), one GPU each; this node has {have}")]
    seen = "nvidia-smi lists none" if gpu.get("nvidia_smi") else "nvidia-smi is not on PATH"
    fix = f"--ranks-per-node {have}" if have else f"run on a GPU node of system {plan.system.name}"
    return [Finding("error", "gpus", f"the plan runs {need} rank(s) with one GPU each, but this node has {have} "
                    f"GPU(s) ({seen})", fix)]


def engine_findings(plan: Plan) -> list[Finding]:
    if plan.runtime in ENGINES:
        engine = ENGINES[plan.runtime]
        ok, said = engine_status(engine)
        if not ok:
            return [Finding("error", "container-engine", f"runtime {plan.runtime} cannot start containers here: "
                            f"{said}", f"start the {engine} service (or run on a node where it runs), or choose "
                            "another --runtime")]
    elif plan.runtime == "docker-api":
        from dlrun.images import docker_api

        try:
            docker_api.client("docker")
        except DlrunError as exc:
            return [Finding("error", "container-engine", f"runtime docker-api cannot reach the Docker API: {exc}",
                            "start the Docker daemon or `podman system service`, and set DOCKER_HOST to it")]
    return []


def image_findings(plan: Plan, *, runs_here: bool, engine_ok: bool,
                   pulled_by_scheduler: bool = False) -> list[Finding]:
    """The image is built (or pulled or loaded) here, so that its digest is recorded and its copy exists
    (a Kubernetes cluster pulls it itself: only the digest is checked)."""
    image = plan.image
    if image.kind != "container":
        return []
    arch = plan.system.arch
    entry = lock.entry(image.name, arch) or {}
    check = None if pulled_by_scheduler else CHECKS.get(plan.runtime)
    field = check.field if check else None
    build = f"dlrun images build {image.name} --engine ...; or pull or load it"
    # The runtime's own form of the image (a SIF, a squashfs, an unpacked tree) has its own recorded digest.
    if not entry.get("digest") and not (field and entry.get(field)):
        return [Finding("error", "image", f"image {image.name} ({arch}) has no digest in {lock.lock_path()}: it "
                        "was never built, pulled or loaded at this site, so the run could not record what it ran",
                        build)]
    where = None
    if field == "rootfs" and runs_here and not (image.rootfs and os.path.isdir(image.rootfs)):
        where = f"no unpacked root filesystem at {image.rootfs}"
    elif field == "sif" and not (image.sif and os.path.exists(image.sif)):
        where = f"no SIF file at {image.sif}"
    elif field == "squashfs" and image.squashfs and not os.path.exists(image.squashfs):
        where = f"no squashfs file at {image.squashfs}"
    elif check is not None and check.tool in ("docker", "podman") and runs_here and engine_ok:
        if not engine_has_image(check.tool, f"{image.uri}:{arch}"):
            where = f"{check.tool} has no image {image.uri}:{arch}"
    if where:
        return [Finding("error", "image", f"image {image.name} ({arch}) is not here for runtime {plan.runtime}: "
                        f"{where}", build)]
    return [Finding("ok", "image", f"image {image.name} ({arch}) has a recorded digest {entry.get('digest')}")]
