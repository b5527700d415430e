"""The pre-launch checks of a Plan on this node."""
from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from typing import Any

from dlrun.launchers.base import PmiRequest
from dlrun.plan import Plan
from dlrun.preflight.findings import Finding
from dlrun.preflight.mpi_pairs import check_mpi_compat, image_mpi, uses_image_mpi
from dlrun.preflight.node import node_findings
from dlrun.preflight.node_rules import job_rule_findings, live_rule_findings
from dlrun.probe.mpi import MpiInfo, parse_mpi_version
from dlrun.registry import LAUNCHERS, RUNTIMES, SCHEDULERS, Tool
from dlrun.runtimes.base import Runtime
from dlrun.secrets import MIN_TEXT_MATCH, short_secrets


def host_mpi_from(inventory: dict[str, Any]) -> MpiInfo | None:
    mpi = inventory.get("mpi") or {}
    if not mpi.get("flavour"):
        return None
    return MpiInfo(flavour=mpi["flavour"], version=mpi.get("version"))


def preflight(plan: Plan, inventory: dict[str, Any] | None = None) -> list[Finding]:
    """Findings for running `plan` from this machine. With no inventory, only the checks of the plan itself
    run (`plan`, `--dry-run`): the system profile's declared host MPI against the image, the image's fabric
    support. With the inventory also those of this node and of this process's environment: tools, GPUs,
    container engine, the image's copy, a launcher started from inside its own job."""
    findings: list[Finding] = []
    launcher, runtime = LAUNCHERS.get(plan.launcher), RUNTIMES.get(plan.runtime)
    pmi = launcher.pmi_request(plan, SCHEDULERS.get(plan.scheduler))
    if inventory is not None:
        findings += inherited_job_findings(plan, os.environ)
        findings += _tool_findings(plan, inventory, pmi)
        findings += node_findings(plan, inventory)
        host = host_mpi_from(inventory)
    else:
        host = parse_mpi_version(plan.system.mpi) if plan.system.mpi else None
    if inventory is not None or host is not None:
        findings += check_mpi_compat(host, image_mpi(plan.image), launcher=launcher, runtime=runtime, pmi=pmi,
                                     uses_mpi=uses_image_mpi(plan))
    findings += _fabric_findings(plan, inventory, runtime)
    findings += _host_bind_findings(plan, runtime)
    findings += tf2_horovod_findings(plan)
    findings += short_secret_findings(plan)
    findings += job_rule_findings(plan)
    if inventory is not None and SCHEDULERS.get(plan.scheduler).runs_here:
        findings += live_rule_findings(plan, inventory)
    return findings


def short_secret_findings(plan: Plan) -> list[Finding]:
    """A secret too short to be told from other text: it is kept out of files by name, but what the ranks print
    of it is not redacted (dlrun.secrets.MIN_TEXT_MATCH)."""
    out = []
    for name, what, length in short_secrets(plan.env, plan.secret_names):
        said = (f"{name} is secret but its value has only {length} character(s): what the ranks print of it is"
                if what == "value" else
                f"the password in {name} has only {length} character(s): printed without its URL, it is")
        out.append(Finding("warn", "secrets", f"{said} not redacted (only secrets of at least {MIN_TEXT_MATCH} "
                           "characters can be told from other text)", fix="a longer secret, or a job that never "
                           "prints it"))
    return out


def inherited_job_findings(plan: Plan, environ: Mapping[str, str]) -> list[Finding]:
    """dlrun started from inside a job of its launcher's own program (a process that initialised MPI, an
    mpirun rank): the program started from here takes itself for part of that job and fails, Open MPI's
    mpirun without a word. Refused for a job that starts here; a batch job may inherit the variables too."""
    launcher = LAUNCHERS.get(plan.launcher)
    found = [(name, why) for name, why in launcher.inherited_job_markers if name in environ]
    if not found or launcher.tool is None:
        return []
    command = launcher.tool.command
    shown = "; ".join(f"{name}={environ[name][:40]!r}: {why}" for name, why in found)
    batch = SCHEDULERS.get(plan.scheduler).batch
    level, effect = (("warn", f"a batch job that inherits this environment would start {command} from inside it")
                     if batch else ("error", f"{command} started from here would take itself for part of that job "
                                    "and fail (Open MPI 4.1: exit 1 with no output)"))
    unset = " ".join(f"-u {name}" for name, _ in found)
    return [Finding(level, "inherited-job", f"dlrun was started from inside an MPI job ({shown}); {effect}",
                    f"start dlrun from a shell outside that job, or without them: env {unset} dlrun ...")]


def tf2_horovod_findings(plan: Plan) -> list[Finding]:
    """dlrun's TensorFlow 2 harness runs several processes only through Horovod: without it every rank would
    fail after TensorFlow's start-up (seconds to minutes later, in its log noise), so it is refused here."""
    image = plan.image
    if image.harness_framework != "tensorflow" or plan.world_size <= 1 or image.horovod_release():
        return []
    fix = ("`make horovod` (builds Horovod with TensorFlow support into this Python)" if image.kind == "host"
           else "an image with Horovod built for TensorFlow")
    return [Finding("error", "horovod", f"dlrun's TensorFlow 2 harness runs {plan.world_size} processes through "
                    f"Horovod, but image {image.name} has no Horovod with TensorFlow support",
                    f"{fix}, or one process (--ranks-per-node 1 --nodes 1)")]


def _host_bind_findings(plan: Plan, runtime: Runtime) -> list[Finding]:
    """A runtime without a container mounts nothing: say that the workload is given the host paths instead."""
    if runtime.runs_container or not plan.mounts:
        return []
    binds = ", ".join(f"{b.source} (not at {b.target})" for b in plan.mounts)
    return [Finding("warn", "binds", f"runtime {runtime.name} runs no container, so nothing is mounted: the workload "
                    f"is given the host path {binds}", "use a container --runtime to mount them at their targets")]


def needed_tools(plan: Plan) -> list[Tool]:
    """The programs the rendered job runs on this machine: the scheduler's submit command; for a job that
    runs here, also the launcher's and the runtime's (a batch job's run on the compute nodes)."""
    scheduler = SCHEDULERS.get(plan.scheduler)
    backends = [scheduler] if scheduler.batch else [scheduler, LAUNCHERS.get(plan.launcher), RUNTIMES.get(plan.runtime)]
    return [backend.tool for backend in backends if backend.tool is not None]


def _tool_findings(plan: Plan, inventory: dict[str, Any], pmi: PmiRequest | None) -> list[Finding]:
    """The commands the rendered job calls on this machine must exist here, and the PMI plugin the launcher
    asks for must be one this node's Slurm has."""
    findings = []
    for tool in needed_tools(plan):
        if not shutil.which(tool.command):
            findings.append(Finding("error", "tools", f"{tool.command} is not on PATH on this machine",
                                    f"install {tool.install}"))
    plugins = (inventory.get("mpi") or {}).get("slurm_mpi_plugins") or []
    if pmi is not None and plugins and pmi.plugin not in plugins:
        findings.append(Finding("warn", "pmi", f"{pmi.shown} but this node's Slurm has MPI plugins "
                                f"{', '.join(plugins)}", f"set {pmi.setting} to one of them"))
    return findings


def _fabric_findings(plan: Plan, inventory: dict[str, Any] | None, runtime: Runtime) -> list[Finding]:
    findings = []
    container = image_mpi(plan.image)
    if isinstance(container, MpiInfo) and runtime.runs_container:
        spec = getattr(plan.image, "mpi", None)
        psm2 = spec.psm2_for(plan.image_arch) if hasattr(spec, "psm2_for") else getattr(spec, "psm2", None)
        if plan.fabric == "opa" and psm2 is False:
            findings.append(Finding("error", "fabric", f"fabric opa but the image's {container.describe()} has no "
                                    "PSM2: MPI traffic would fall back to TCP",
                                    "use an image whose MPI is built with PSM2 (psm2: true)"))
        ucx = getattr(spec, "ucx", None)
        verbs = getattr(spec, "verbs", None)
        if plan.fabric in ("ib", "roce") and verbs is False and (ucx is None or getattr(ucx, "not_used", None)):
            findings.append(Finding("error", "fabric", f"fabric {plan.fabric} but the image's {container.describe()} "
                                    "has neither UCX nor verbs", "use an image whose MPI is built with UCX"))
    if inventory is not None and SCHEDULERS.get(plan.scheduler).runs_here and plan.fabric != "tcp":
        usable = inventory.get("fabrics", {}).get("usable", [])
        if plan.fabric not in usable:
            findings.append(Finding("error", "fabric", f"fabric {plan.fabric} was asked for, but this node offers "
                                    f"{', '.join(usable) or 'none'} (from /sys/class/infiniband, /dev/infiniband, "
                                    "/dev/hfi1_*)", f"--fabric {usable[0] if usable else 'tcp'}"))
    return findings
