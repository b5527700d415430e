"""The built-ins that are detected rather than written: system `localhost` and image `host`."""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from dlrun.catalog.models import CpuSpec, GpuSpec, ImageSpec, Source, SystemSpec

HARNESS_DIR = Path(__file__).resolve().parents[1] / "workloads"


def _meminfo_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    return 1.0


def _numa_nodes() -> int:
    nodes = list(Path("/sys/devices/system/node").glob("node[0-9]*"))
    return max(len(nodes), 1)


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "cpu\t")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _pci_numa_node(bus_id: str) -> int | None:
    """NUMA node of a PCI device from sysfs (nvidia-smi prints 00000000:3B:00.0; sysfs wants 0000:3b:00.0)."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    path = Path("/sys/bus/pci/devices") / f"{domain[-4:]}:{rest}" / "numa_node"
    try:
        node = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def _gpus() -> GpuSpec | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name,memory.total,pci.bus_id", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    rows = [line.split(",") for line in out.strip().splitlines() if line.strip()]
    if not rows:
        return None
    numa = [_pci_numa_node(row[2]) if len(row) > 2 else None for row in rows]
    return GpuSpec(model=rows[0][0].strip(), count_per_node=len(rows),
                   memory_gb=round(float(rows[0][1]) / 1024, 1),
                   numa_affinity=None if None in numa else [int(n) for n in numa])  # type: ignore[arg-type]


def _arch() -> str:
    machine = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine)


def detect_localhost() -> SystemSpec:
    from dlrun.fabrics import detected_configs

    cpus = _usable_cpus()
    arch = _arch()
    fabric_config = detected_configs("/")
    return SystemSpec(
        name="localhost",
        description=f"This machine ({platform.node()}), detected: {cpus} CPUs"
        + (", GPUs via nvidia-smi" if shutil.which("nvidia-smi") else ", no GPU"),
        arch=arch if arch in ("x86_64", "ppc64le", "aarch64") else "x86_64",
        nodes=1,
        cpu=CpuSpec(model=_cpu_model(), sockets=1, cores_per_socket=cpus, numa_nodes=_numa_nodes()),
        memory_gb=_meminfo_gb(),
        gpus=_gpus(),
        fabrics=list(fabric_config),  # best first: ib, opa, roce, tcp
        default_fabric="auto",
        fabric_config=fabric_config,
        scheduler="local",
        launcher="mpirun",
        runtime="host",
        default_image="host",
        # Small enough that `dlrun run resnet50` finishes in seconds per step on a laptop-class CPU.
        batch_sizes={"lenet": 64, "trivial": 64},
        default_batch_size=16,
        # Short by default: a first `dlrun run resnet50` on a 2-core machine finishes in about a minute.
        default_steps=10,
        default_warmup_steps=2,
        sources=[Source(doc="detected", where="/proc, /sys, nvidia-smi")],
        detected=True,
    )


def host_image() -> ImageSpec:
    """No container: the harness runs with this Python, from the installed package."""
    return ImageSpec(
        name="host",
        description="No container: the local Python interpreter and its installed PyTorch",
        kind="host",
        arch=[_arch()] if _arch() in ("x86_64", "ppc64le", "aarch64") else ["x86_64"],
        framework="pytorch",
        python=sys.executable,
        harness_dir=str(HARNESS_DIR),
    )
