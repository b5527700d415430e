"""Checks of what the job needs from the node it runs on: enough GPUs, a container engine that answers, and
the plan's image present with its digest recorded. Batch jobs run elsewhere: from a submit host only the
image's recorded digest (and a SIF file, which lives on the shared filesystem) is checked here."""
from __future__ import annotations

import os
from typing import Any

from dlrun.errors import DlrunError
from dlrun.images import lock
from dlrun.plan import Plan
from dlrun.preflight.findings import Finding
from dlrun.probe.daemons import engine_has_image, engine_status
from dlrun.registry import RUNTIMES, SCHEDULERS
from dlrun.runtimes.base import ContainerService, ImageCopy


def node_findings(plan: Plan, inventory: dict[str, Any]) -> list[Finding]:
    scheduler = SCHEDULERS.get(plan.scheduler)
    runs_here = scheduler.runs_here  # batch jobs run on compute nodes; Kubernetes pods in the cluster
    findings: list[Finding] = []
    engine_ok = True
    if runs_here:
        findings += gpu_findings(plan, inventory) + arch_findings(plan)
        engine = engine_findings(plan)
        engine_ok = not engine
        findings += engine
    return findings + image_findings(plan, runs_here=runs_here, engine_ok=engine_ok,
                                     pulled_by_scheduler=scheduler.runs_image)


def arch_findings(plan: Plan) -> list[Finding]:
    """An image of another architecture than this node's runs only emulated, and only where the node can."""
    from dlrun.images import emulation
    from dlrun.images.spec import host_arch

    arch = plan.image_arch
    if arch == host_arch():
        return []
    problem = emulation.handler_state(arch)
    if problem is None:
        return [Finding("warn", "arch", f"image {plan.image.name} is {arch}: it runs emulated on this "
                        f"{host_arch()} node (qemu-user), many times slower; the run is recorded as emulated, "
                        "never as a hardware figure")]
    return [Finding("error", "arch", f"image {plan.image.name} is {arch} and this node is {host_arch()}: {problem}",
                    f"{emulation.INSTALL} (as root: it registers the qemu handlers), or run on a {arch} node")]


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
    """The engine service the runtime's containers need answers here (its CLI, or the Docker API)."""
    service = RUNTIMES.get(plan.runtime).service
    if service is None:
        return []
    if service.via_api:
        from dlrun.images import docker_api

        try:
            docker_api.client(service.engine)
        except DlrunError as exc:
            return [Finding("error", "container-engine", f"runtime {plan.runtime} cannot reach the Docker API: {exc}",
                            "start the Docker daemon or `podman system service`, and set DOCKER_HOST to it")]
        return []
    ok, said = engine_status(service.engine, service.status_argv)
    if not ok:
        return [Finding("error", "container-engine", f"runtime {plan.runtime} cannot start containers here: "
                        f"{said}", f"start the {service.engine} service (or run on a node where it runs), or choose "
                        "another --runtime")]
    return []


def _missing(copy: ImageCopy, service: ContainerService | None, *, runs_here: bool, engine_ok: bool) -> str | None:
    """Why the runtime's copy of the image is not where it will be used, or None. A batch job's node has its
    own image store: from a submit host only copies on the shared filesystem are looked for."""
    if copy.path is not None or copy.reference is None:  # a file or an unpacked tree
        if (runs_here or copy.shared) and not (copy.path and os.path.exists(copy.path)):
            return f"no {copy.what} at {copy.path}"
    elif service is not None and not service.via_api and runs_here and engine_ok:
        if not engine_has_image(service.engine, copy.reference):
            return f"{service.engine} has no image {copy.reference}"
    return None


def image_findings(plan: Plan, *, runs_here: bool, engine_ok: bool,
                   pulled_by_scheduler: bool = False) -> list[Finding]:
    """The image is built (or pulled or loaded) here, so that its digest is recorded and its copy exists
    (a Kubernetes cluster pulls it itself: only the digest is checked)."""
    image = plan.image
    if image.kind != "container":
        return []
    arch = plan.image_arch
    entry = lock.entry(image.name, arch) or {}
    runtime = RUNTIMES.get(plan.runtime)
    copy = None if pulled_by_scheduler else runtime.image_copy(plan)
    field = copy.field if copy else None
    build = f"dlrun images build {image.name} --engine ...; or pull or load it"
    # The runtime's own form of the image (a SIF, a squashfs, an unpacked tree) has its own recorded digest.
    if not entry.get("digest") and not (field and entry.get(field)):
        return [Finding("error", "image", f"image {image.name} ({arch}) has no digest in {lock.lock_path()}: it "
                        "was never built, pulled or loaded at this site, so the run could not record what it ran",
                        build)]
    where = _missing(copy, runtime.service, runs_here=runs_here, engine_ok=engine_ok) if field else None
    if where:
        return [Finding("error", "image", f"image {image.name} ({arch}) is not here for runtime {plan.runtime}: "
                        f"{where}", build)]
    return [Finding("ok", "image", f"image {image.name} ({arch}) has a recorded digest {entry.get('digest')}")]
