"""The node as a whole: the facts a `localhost` system profile is made from, and the full inventory that
`dlrun doctor` prints and every run directory keeps (`inventory.json`)."""
from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlrun import __version__
from dlrun.probe.cpu import (cpu_inventory, cpu_model, machine_arch, memory_gb, memory_kib, numa_nodes,
                             usable_cpus)
from dlrun.probe.fabric_devices import detect_fabrics
from dlrun.probe.sysfs import read_text
from dlrun.probe.gpu import gpu_inventory, gpus
from dlrun.probe.mpi import mpi_inventory
from dlrun.probe.tools import tool_output, tool_versions
from dlrun.probe.topology import probe_topology


@dataclass(frozen=True)
class HostFacts:
    """What a `localhost` system profile needs to know about this machine."""

    hostname: str
    arch: str
    usable_cpus: int
    cpu_model: str | None
    numa_nodes: int
    memory_gb: float
    gpus: tuple[dict[str, Any], ...]
    fabrics: dict[str, Any]
    python: str
    horovod: str | None = None  # the version of Horovod this Python imports, if any
    horovod_tensorflow: bool = False  # whether that Horovod was built with TensorFlow support


@functools.lru_cache(maxsize=1)
def probe_host() -> HostFacts:
    """This machine's facts, probed once per process."""
    return HostFacts(hostname=platform.node(), arch=machine_arch(), usable_cpus=usable_cpus(),
                     cpu_model=cpu_model(), numa_nodes=max(len(numa_nodes()), 1), memory_gb=memory_gb() or 1.0,
                     gpus=gpus(), fabrics=detect_fabrics("/"), python=sys.executable,
                     horovod=_dist_version("horovod"), horovod_tensorflow=_horovod_has("tensorflow"))


@functools.lru_cache(maxsize=1)
def machine_inventory() -> dict[str, Any]:
    """The part of the node inventory a hardware fingerprint is made from (dlrun.results.fingerprint): CPUs,
    memory, GPUs and fabrics, probed once per process."""
    return {"cpu": cpu_inventory(), "memory_gb": memory_gb(), "memory_kib": memory_kib(), "gpu": gpu_inventory(),
            "fabrics": detect_fabrics("/")}


def scheduler_inventory(commands: Mapping[str, str]) -> dict[str, Any]:
    tools = {name: shutil.which(command) for name, command in commands.items()}
    text = tool_output(["sinfo", "--version"]) or ""  # None where Slurm's client is not installed
    version = re.search(r"slurm[- ]([\d.]+)", text)
    return {"tools": tools, "slurm_version": version.group(1) if version else None,
            "slurm_config_error": text.splitlines()[-1] if text and not version else None,
            "in_slurm_job": os.environ.get("SLURM_JOB_ID"), "in_lsf_job": os.environ.get("LSB_JOBID"),
            "in_pbs_job": os.environ.get("PBS_JOBID")}


def _dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import version as dist_version

        return dist_version(name)
    except Exception:  # noqa: BLE001 - not installed is a normal answer here
        return None


def _horovod_has(framework: str) -> bool:
    """Whether the installed Horovod has its extension for `framework` (horovod/<framework>/mpi_lib*.so, which
    a build with HOROVOD_WITHOUT_<FRAMEWORK>=1 leaves out); found on disk, without importing Horovod."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("horovod")
    except (ImportError, ValueError):
        return False
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    return any(any((Path(folder) / framework).glob("mpi_lib*.so")) for folder in folders)


def _torch_version() -> str | None:
    return _dist_version("torch")


def node_inventory(*, runtimes: Mapping[str, str], schedulers: Mapping[str, str],
                   gpu_topology: bool = False) -> dict[str, Any]:
    """The node as JSON: CPU/NUMA, memory, GPUs, fabrics, container runtimes, MPI/PMI, schedulers.
    `runtimes` and `schedulers` map backend names to the command each runs (from the backend registries)."""
    started = time.time()
    pretty = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', read_text(Path("/etc/os-release")) or "", re.MULTILINE)
    versions = tool_versions(runtimes.values())
    inventory = {
        "dlrun_version": __version__,
        "collected_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hostname": platform.node(),
        "os": pretty.group(1) if pretty else platform.platform(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "cpu": cpu_inventory(),
        "memory_gb": memory_gb(),
        "memory_kib": memory_kib(),
        "gpu": gpu_inventory(topology=gpu_topology),
        "fabrics": detect_fabrics("/"),
        "topology": probe_topology(with_nvidia_smi=bool(gpus())),  # links of GPUs and NICs, topo -m
        "container_runtimes": {name: versions[command] for name, command in sorted(runtimes.items())},
        "mpi": mpi_inventory(),
        "schedulers": scheduler_inventory(schedulers),
        "python": sys.version.split()[0],
        "torch": _torch_version(),
    }
    inventory["collect_seconds"] = round(time.time() - started, 3)
    return inventory
