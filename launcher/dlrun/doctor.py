"""Safety checks before launch, and the node inventory stored with every run.

`node_inventory()` says what this node has (CPU and NUMA layout, GPUs and their topology, fabrics, NICs,
container runtimes, MPI and PMI flavours, schedulers) as JSON. `preflight(plan)` turns that into findings;
an `error` finding refuses the run with the reason and the fix. The rule that matters most: in the hybrid
model the host's mpirun starts ranks that use the image's MPI, and a different MPI flavour, release series
or PMI makes every rank believe it is rank 0, or hangs; refuse that pair before anything starts.
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dlrun.errors import DlrunError

RUNTIME_TOOLS = {"singularity": "singularity", "apptainer": "apptainer", "docker": "docker", "podman": "podman",
                 "charliecloud": "ch-run", "enroot": "enroot"}
LAUNCHER_TOOLS = {"mpirun": "mpirun", "srun": "srun", "jsrun": "jsrun", "horovodrun": "horovodrun"}
SCHEDULER_TOOLS = {"slurm": "sbatch", "pbs": "qsub", "lsf": "bsub", "kubernetes": "kubectl"}
PACKAGE_HINT = {
    "mpirun": "OpenMPI (Debian: apt-get install openmpi-bin; HPC sites: module load openmpi)",
    "mpiexec": "OpenMPI (Debian: apt-get install openmpi-bin; HPC sites: module load openmpi)",
    "srun": "the Slurm client (Debian: apt-get install slurm-client)",
    "sbatch": "the Slurm client (Debian: apt-get install slurm-client)",
    "singularity": "SingularityCE (https://sylabs.io) or Apptainer",
    "apptainer": "Apptainer (https://apptainer.org)",
    "docker": "Docker Engine with the NVIDIA Container Toolkit",
    "podman": "Podman (Debian: apt-get install podman)",
    "ch-run": "Charliecloud (Debian: apt-get install charliecloud)",
    "enroot": "enroot and the pyxis Slurm plugin (https://github.com/NVIDIA/pyxis)",
    "jsrun": "IBM Job Step Manager (LSF with CSM)",
    "bsub": "the LSF client",
    "qsub": "the PBS client",
    "kubectl": "kubectl with a kubeconfig for a cluster running the Kubeflow MPI operator",
    "horovodrun": "Horovod (pip install horovod)",
}


class PreflightError(DlrunError):
    """The run would fail or measure the wrong thing; refused before anything starts."""

    exit_code = 2


@dataclass(frozen=True)
class Finding:
    level: str  # ok | warn | error
    check: str
    message: str
    fix: str | None = None

    def line(self) -> str:
        return self.message + (f"; fix: {self.fix}" if self.fix else "")


# ------------------------------------------------------------------------------------------ MPI flavours
@dataclass(frozen=True)
class MpiInfo:
    flavour: str  # openmpi | spectrum | hpcx | mpich | intel | mvapich2 | unknown
    version: str | None
    pmi: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        """Open MPI derivatives share the ORTE/PRRTE launch protocol; MPICH derivatives share hydra/PMI."""
        return {"spectrum": "openmpi", "hpcx": "openmpi", "openmpi": "openmpi",
                "intel": "mpich", "mvapich2": "mpich", "mpich": "mpich"}.get(self.flavour, self.flavour)

    @property
    def series(self) -> tuple[int, int] | None:
        match = re.match(r"(\d+)\.(\d+)", self.version or "")
        return (int(match.group(1)), int(match.group(2))) if match else None

    def describe(self) -> str:
        return f"{self.flavour} {self.version or '?'}" + (f" ({'+'.join(self.pmi)})" if self.pmi else "")


def parse_mpi_version(text: str) -> MpiInfo | None:
    """The output of `mpirun --version` (or a catalog string like `openmpi 4.0.1`) -> MpiInfo."""
    if not text or not text.strip():
        return None
    patterns = [
        ("spectrum", r"IBM Spectrum MPI\)?\s*([\d.]+)"),
        ("intel", r"Intel\(R\) MPI Library.*?Version\s+([\w. ]+?)(?:\s+Build|$)"),
        ("mvapich2", r"MVAPICH2?\s+Version\s*:?\s*([\d][\d.a-z]*)"),
        ("hpcx", r"hpcx[- ]v?([\d.]+)"),
        ("openmpi", r"Open MPI\)?\s+v?([\d.]+\w*)"),
        ("mpich", r"HYDRA build details:[\s\S]*?Version:\s+([\d.a-z]+)"),
        ("mpich", r"MPICH Version:\s+([\d.a-z]+)"),
    ]
    for flavour, pattern in patterns:
        match = re.search(pattern, text, re.IGNORECASE)
        if match:
            return MpiInfo(flavour=flavour, version=match.group(1).strip())
    match = re.fullmatch(r"\s*(openmpi|spectrum|hpcx|mpich|intel|mvapich2)[\s-]+v?([\w.]+)\s*", text, re.IGNORECASE)
    if match:
        return MpiInfo(flavour=match.group(1).lower(), version=match.group(2))
    return MpiInfo(flavour="unknown", version=None)


def image_mpi(image: Any) -> MpiInfo | None | str:
    """The image's MPI from its pinned stack: MpiInfo, None when the image declares none, or "not_used"."""
    spec = getattr(image, "mpi", None)
    if spec is None:
        return None
    if getattr(spec, "not_used", None):
        return "not_used"
    if isinstance(spec, str):
        return parse_mpi_version(spec)
    flavour = getattr(spec, "flavour", None) or (spec.get("flavour") if isinstance(spec, dict) else None)
    version = getattr(spec, "version", None) or (spec.get("version") if isinstance(spec, dict) else None)
    pmi = getattr(spec, "pmi", None) or (spec.get("pmi") if isinstance(spec, dict) else None) or ()
    if not flavour:
        return None
    return MpiInfo(flavour=str(flavour), version=str(version) if version else None, pmi=tuple(pmi))


def uses_image_mpi(plan: Any) -> bool:
    """Whether the ranks load the image's MPI library. The PyTorch harness does not: it reads its rank from
    the launcher's environment and communicates over gloo/NCCL. Horovod (horovodrun, and the TensorFlow
    stacks built on Horovod) does."""
    return plan.launcher == "horovodrun" or plan.image.framework != "pytorch" or plan.workload.framework != "pytorch"


def check_mpi_compat(host: MpiInfo | None, container: MpiInfo | None | str, *, launcher: str,
                     runtime: str, srun_mpi: str = "pmix", uses_mpi: bool = True) -> list[Finding]:
    """Host vs container MPI for the hybrid model (and PMI for srun). When the ranks do not load the image's
    MPI (`uses_mpi` False) a mismatch is a warning: this job runs, an MPI program in the same image would not."""
    findings = _mpi_compat(host, container, launcher=launcher, runtime=runtime, srun_mpi=srun_mpi)
    if uses_mpi:
        return findings
    return [Finding("warn", f.check, f.message + " (this job's ranks do not load the image's MPI, so it runs; "
                    "an MPI or Horovod program in this image would not)", f.fix) if f.level == "error" else f
            for f in findings]


def _mpi_compat(host: MpiInfo | None, container: MpiInfo | None | str, *, launcher: str,
                runtime: str, srun_mpi: str) -> list[Finding]:
    check = "mpi-compat"
    if runtime == "host" or container is None:
        if runtime != "host" and launcher in ("mpirun", "horovodrun"):
            return [Finding("warn", check, "the image declares no MPI, so host/container compatibility cannot be "
                            "checked", "pin the image's MPI in containers/<tag>/image.yaml")]
        return []
    if container == "not_used":
        return [Finding("ok", check, "the image has no MPI: ranks use only the launcher's environment")]
    assert isinstance(container, MpiInfo)
    if launcher in ("mpirun", "horovodrun"):
        if host is None:
            return [Finding("error", check, f"{launcher} needs an MPI on the host, none found",
                            f"install or load {container.describe()} on the host, or use --launcher srun")]
        if host.family != container.family:
            return [Finding("error", check,
                            f"host {host.describe()} cannot start ranks that use the image's {container.describe()}: "
                            "different MPI families do not share a launch protocol (every rank would see "
                            "itself as rank 0 of 1, or hang)",
                            f"use a host {container.flavour} {container.version} (module load), or --launcher srun "
                            "with PMIx, or an image built with the host's MPI")]
        if host.series and container.series and host.series != container.series:
            return [Finding("error", check,
                            f"host {host.describe()} and image {container.describe()} are different release series "
                            f"({host.series[0]}.{host.series[1]} vs {container.series[0]}.{container.series[1]}); "
                            "the host launcher and the image's MPI library must match in major.minor",
                            f"use Open MPI {container.series[0]}.{container.series[1]}.x on the host (module load "
                            f"openmpi/{container.series[0]}.{container.series[1]}), or --launcher srun with PMIx, or "
                            f"an image pinned to Open MPI {host.series[0]}.{host.series[1]}")]
        if host.series is None or container.series is None:
            return [Finding("warn", check, f"cannot compare versions of host {host.describe()} and image "
                            f"{container.describe()}")]
        return [Finding("ok", check, f"host {host.describe()} and image {container.describe()} match in "
                        f"major.minor")]
    if launcher == "srun":
        wanted = "pmix" if srun_mpi.startswith("pmix") else srun_mpi
        if container.pmi and wanted not in container.pmi:
            return [Finding("error", check,
                            f"srun --mpi={srun_mpi} but the image's {container.describe()} supports "
                            f"{', '.join(container.pmi)} only",
                            f"set scheduler_options.srun_mpi to {container.pmi[0]} in the system profile, or use "
                            "an image built with PMIx")]
        return [Finding("ok", check, f"srun --mpi={srun_mpi} and image {container.describe()}")]
    return []


# ------------------------------------------------------------------------------------------ inventory
def _run(argv: list[str], timeout: float = 10) -> str | None:
    if not shutil.which(argv[0]):
        return None
    env = {**os.environ, "USER": os.environ.get("USER") or "root"}  # ch-run refuses to start without USER
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return (proc.stdout + proc.stderr).strip() or None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cpu_inventory(root: Path = Path("/")) -> dict[str, Any]:
    cpu_dir = root / "sys" / "devices" / "system" / "cpu"
    packages: set[str] = set()
    cores: set[tuple[str, str]] = set()
    logical = 0
    for cpu in sorted(cpu_dir.glob("cpu[0-9]*")):
        package = _read(cpu / "topology" / "physical_package_id")
        core = _read(cpu / "topology" / "core_id")
        if package is None:
            continue
        logical += 1
        packages.add(package)
        cores.add((package, core or ""))
    numa = []
    for node in sorted((root / "sys" / "devices" / "system" / "node").glob("node[0-9]*"),
                       key=lambda p: int(p.name[4:])):
        meminfo = _read(node / "meminfo") or ""
        match = re.search(r"MemTotal:\s+(\d+)", meminfo)
        numa.append({"node": int(node.name[4:]), "cpulist": _read(node / "cpulist"),
                     "memory_kb": int(match.group(1)) if match else None})
    model = None
    for line in (_read(root / "proc" / "cpuinfo") or "").splitlines():
        if line.lower().startswith(("model name", "cpu\t")):
            model = line.split(":", 1)[1].strip()
            break
    return {"model": model, "logical_cpus": logical or os.cpu_count(), "sockets": len(packages) or None,
            "physical_cores": len(cores) or None,
            "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "numa": numa}


def gpu_inventory() -> dict[str, Any]:
    out = _run(["nvidia-smi", "--query-gpu=index,name,memory.total,pci.bus_id,uuid,driver_version",
                "--format=csv,noheader,nounits"], timeout=30)
    if out is None:
        return {"nvidia_smi": False, "gpus": []}
    from dlrun.catalog.localhost import _pci_numa_node

    gpus = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 6 or not parts[0].isdigit():
            continue
        gpus.append({"index": int(parts[0]), "name": parts[1], "memory_mib": parts[2], "pci_bus_id": parts[3],
                     "uuid": parts[4], "driver": parts[5], "numa_node": _pci_numa_node(parts[3])})
    return {"nvidia_smi": True, "gpus": gpus, "topology": _run(["nvidia-smi", "topo", "-m"], timeout=30)}


def runtime_inventory() -> dict[str, Any]:
    found = {}
    for name, tool in RUNTIME_TOOLS.items():
        path = shutil.which(tool)
        text = _run([tool, "--version"]) if path else None
        found[name] = {"path": path, "version": text.splitlines()[0] if text else None}
    return found


def mpi_inventory() -> dict[str, Any]:
    text = _run(["mpirun", "--version"])
    info = parse_mpi_version(text) if text else None
    pmix_components: list[str] = []
    if info and info.family == "openmpi":
        ompi = _run(["ompi_info", "--parsable"], timeout=20) or ""
        pmix_components = sorted({m.group(1) for m in re.finditer(r"mca:pmix:(\w+):version", ompi)})
    slurm_plugins = sorted({p.name[4:].split(".")[0] for d in
                            (Path("/usr/lib/x86_64-linux-gnu/slurm-wlm"), Path("/usr/lib64/slurm"),
                             Path("/usr/lib/slurm"), Path("/usr/lib/aarch64-linux-gnu/slurm-wlm"),
                             Path("/usr/lib/powerpc64le-linux-gnu/slurm-wlm"))
                            for p in d.glob("mpi_*.so")})
    return {"mpirun": shutil.which("mpirun"), "version_text": text.splitlines()[0] if text else None,
            "flavour": info.flavour if info else None, "version": info.version if info else None,
            "openmpi_pmix_components": pmix_components, "slurm_mpi_plugins": slurm_plugins}


def scheduler_inventory() -> dict[str, Any]:
    tools = {name: shutil.which(tool) for name, tool in SCHEDULER_TOOLS.items()}
    tools["jsrun"] = shutil.which("jsrun")
    text = (_run(["sinfo", "--version"]) or "") if tools["slurm"] else ""
    version = re.search(r"slurm[- ]([\d.]+)", text)
    return {"tools": tools, "slurm_version": version.group(1) if version else None,
            "slurm_config_error": text.splitlines()[-1] if text and not version else None,
            "in_slurm_job": os.environ.get("SLURM_JOB_ID"), "in_lsf_job": os.environ.get("LSB_JOBID"),
            "in_pbs_job": os.environ.get("PBS_JOBID")}


def node_inventory() -> dict[str, Any]:
    from dlrun import __version__
    from dlrun.fabrics import detect_fabrics

    started = time.time()
    os_release = _read(Path("/etc/os-release")) or ""
    pretty = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', os_release, re.MULTILINE)
    try:
        from importlib.metadata import version as dist_version

        torch_version = dist_version("torch")
    except Exception:  # noqa: BLE001 - not installed is a normal answer here
        torch_version = None
    meminfo = _read(Path("/proc/meminfo")) or ""
    mem = re.search(r"MemTotal:\s+(\d+)", meminfo)
    inventory = {
        "dlrun_version": __version__,
        "collected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hostname": platform.node(),
        "os": pretty.group(1) if pretty else platform.platform(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "cpu": cpu_inventory(),
        "memory_gb": round(int(mem.group(1)) / 1024**2, 1) if mem else None,
        "gpu": gpu_inventory(),
        "fabrics": detect_fabrics("/"),
        "container_runtimes": runtime_inventory(),
        "mpi": mpi_inventory(),
        "schedulers": scheduler_inventory(),
        "python": sys.version.split()[0],
        "torch": torch_version,
    }
    inventory["collect_seconds"] = round(time.time() - started, 3)
    return inventory


# ------------------------------------------------------------------------------------------ preflight
def host_mpi_from(inventory: dict[str, Any]) -> MpiInfo | None:
    mpi = inventory.get("mpi") or {}
    if not mpi.get("flavour"):
        return None
    return MpiInfo(flavour=mpi["flavour"], version=mpi.get("version"))


def preflight(plan: Any, inventory: dict[str, Any] | None = None) -> list[Finding]:
    """Findings for running `plan` from this machine. With no inventory, only the static checks run
    (the system profile's declared host MPI against the image)."""
    findings: list[Finding] = []
    if inventory is not None:
        findings += _tool_findings(plan, inventory)
        host = host_mpi_from(inventory)
    else:
        host = parse_mpi_version(plan.system.mpi) if plan.system.mpi else None
    if inventory is not None or host is not None:
        findings += check_mpi_compat(host, image_mpi(plan.image), launcher=plan.launcher, runtime=plan.runtime,
                                     srun_mpi=plan.scheduler_options.srun_mpi, uses_mpi=uses_image_mpi(plan))
    findings += _fabric_findings(plan, inventory)
    return findings


def _tool_findings(plan: Any, inventory: dict[str, Any]) -> list[Finding]:
    """The commands the rendered job calls on this machine must exist here."""
    needed: list[str] = []
    tool = SCHEDULER_TOOLS.get(plan.scheduler)
    if tool:
        needed.append(tool)
    if plan.scheduler == "local":
        if plan.launcher in LAUNCHER_TOOLS:
            needed.append(LAUNCHER_TOOLS[plan.launcher])
        if plan.runtime in RUNTIME_TOOLS and plan.runtime != "enroot":
            needed.append(RUNTIME_TOOLS[plan.runtime])
    findings = []
    for name in needed:
        if not shutil.which(name):
            findings.append(Finding("error", "tools", f"{name} is not on PATH on this machine",
                                    f"install {PACKAGE_HINT.get(name, name)}"))
    plugins = (inventory.get("mpi") or {}).get("slurm_mpi_plugins") or []
    wanted = plan.scheduler_options.srun_mpi
    if plan.launcher == "srun" and plugins and wanted not in plugins:
        findings.append(Finding("warn", "pmi", f"srun --mpi={wanted} but this node's Slurm has MPI plugins "
                                f"{', '.join(plugins)}", "set scheduler_options.srun_mpi to one of them"))
    return findings


def _fabric_findings(plan: Any, inventory: dict[str, Any] | None) -> list[Finding]:
    findings = []
    container = image_mpi(plan.image)
    if isinstance(container, MpiInfo) and plan.runtime != "host":
        spec = getattr(plan.image, "mpi", None)
        psm2 = spec.psm2_for(plan.system.arch) if hasattr(spec, "psm2_for") else getattr(spec, "psm2", None)
        if plan.fabric == "opa" and psm2 is False:
            findings.append(Finding("error", "fabric", f"fabric opa but the image's {container.describe()} has no "
                                    "PSM2: MPI traffic would fall back to TCP",
                                    "use an image whose MPI is built with PSM2 (psm2: true)"))
        ucx = getattr(spec, "ucx", None)
        verbs = getattr(spec, "verbs", None)
        if plan.fabric in ("ib", "roce") and verbs is False and (ucx is None or getattr(ucx, "not_used", None)):
            findings.append(Finding("error", "fabric", f"fabric {plan.fabric} but the image's {container.describe()} "
                                    "has neither UCX nor verbs", "use an image whose MPI is built with UCX"))
    if inventory is not None and plan.scheduler == "local" and plan.fabric != "tcp":
        usable = inventory.get("fabrics", {}).get("usable", [])
        if plan.fabric not in usable:
            findings.append(Finding("error", "fabric", f"fabric {plan.fabric} was asked for, but this node offers "
                                    f"{', '.join(usable) or 'none'} (from /sys/class/infiniband, /dev/infiniband, "
                                    "/dev/hfi1_*)", f"--fabric {usable[0] if usable else 'tcp'}"))
    return findings


def refuse_on_errors(findings: list[Finding]) -> None:
    errors = [f for f in findings if f.level == "error"]
    if errors:
        raise PreflightError("refusing to run: " + " | ".join(f.line() for f in errors))


def findings_json(findings: list[Finding]) -> list[dict[str, Any]]:
    return [asdict(f) for f in findings]


def doctor_report(catalog: Any, *, system: str | None = None, image: str | None = None) -> dict[str, Any]:
    """Inventory of this node plus the checks for running `system`'s default job (with `image`) from here."""
    from dlrun.plan import resolve_plan

    inventory = node_inventory()
    workload = "trivial" if "trivial" in catalog.workloads else sorted(catalog.workloads)[0]
    plan = resolve_plan(catalog, workload, system=system or "localhost", image=image)
    findings = preflight(plan, inventory)
    host = host_mpi_from(inventory)
    declared = parse_mpi_version(plan.system.mpi) if plan.system.mpi else None
    if declared and host and (declared.flavour, declared.series) != (host.flavour, host.series):
        findings.append(Finding("warn", "mpi-declared", f"system {plan.system.name} declares {declared.describe()} "
                                f"but this node has {host.describe()}",
                                "load the site's MPI module, or correct `mpi` in the system profile"))
    usable = inventory["fabrics"]["usable"]
    missing = [f for f in plan.system.fabrics if f not in usable]
    if missing and not plan.system.detected:
        findings.append(Finding("warn", "fabric", f"this node offers {', '.join(usable)}; system "
                                f"{plan.system.name} lists {', '.join(plan.system.fabrics)}",
                                f"run `dlrun doctor --system {plan.system.name}` on a compute node of that system"))
    if not findings:
        findings.append(Finding("ok", "all", "no problems found"))
    return {
        "inventory": inventory,
        "plan": {"system": plan.system.name, "image": plan.image.name, "scheduler": plan.scheduler,
                 "launcher": plan.launcher, "runtime": plan.runtime, "fabric": plan.fabric},
        "checks": findings_json(findings),
    }
