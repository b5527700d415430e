"""CPUs, NUMA nodes and memory from /proc and /sys."""
from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any

from dlrun.harness.harness_node import cpu_identity, isa_level
from dlrun.probe.sysfs import read_text



def machine_arch() -> str:
    """This machine's architecture in the names images use (x86_64, ppc64le, aarch64)."""
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64", "ppc64el": "ppc64le"}.get(machine, machine)


def usable_cpus() -> int:
    """The CPUs this process can have: its affinity (cpuset), capped by its cgroup's CPU quota."""
    try:
        allowed = len(os.sched_getaffinity(0))
    except AttributeError:
        allowed = os.cpu_count() or 1
    quota = cpu_quota()
    return max(1, min(allowed, quota)) if quota else allowed


def cpu_quota(root: Path = Path("/")) -> int | None:
    """CPUs' worth of time this process's cgroup may use (cgroup v2 cpu.max, v1 cpu.cfs_quota_us over
    cpu.cfs_period_us, rounded up); None without a quota."""
    for line in (read_text(root / "proc" / "self" / "cgroup") or "").splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # v2: "0::/path"
            text = read_text(root / "sys" / "fs" / "cgroup" / path.lstrip("/") / "cpu.max") or ""
            quota, _, period = text.partition(" ")
        elif "cpu" in controllers.split(","):
            base = root / "sys" / "fs" / "cgroup" / controllers / path.lstrip("/")
            quota, period = read_text(base / "cpu.cfs_quota_us") or "", read_text(base / "cpu.cfs_period_us") or ""
        else:
            continue
        if quota.strip().isdigit() and period.strip().isdigit() and int(period) > 0:
            return -(-int(quota) // int(period))
    return None


def memory_kib(root: Path = Path("/")) -> int | None:
    match = re.search(r"MemTotal:\s+(\d+)", read_text(root / "proc" / "meminfo") or "")
    return int(match.group(1)) if match else None


def memory_gb(root: Path = Path("/")) -> float | None:
    kib = memory_kib(root)
    return round(kib / 1024**2, 1) if kib is not None else None


def cpu_model(root: Path = Path("/")) -> str | None:
    for line in (read_text(root / "proc" / "cpuinfo") or "").splitlines():
        if line.lower().startswith(("model name", "cpu\t")):
            return line.split(":", 1)[1].strip()
    return None


def numa_nodes(root: Path = Path("/")) -> list[dict[str, Any]]:
    nodes = []
    for node in sorted((root / "sys" / "devices" / "system" / "node").glob("node[0-9]*"),
                       key=lambda p: int(p.name[4:])):
        match = re.search(r"MemTotal:\s+(\d+)", read_text(node / "meminfo") or "")
        nodes.append({"node": int(node.name[4:]), "cpulist": read_text(node / "cpulist"),
                      "memory_kb": int(match.group(1)) if match else None})
    return nodes


def cpu_inventory(root: Path = Path("/")) -> dict[str, Any]:
    cpu_dir = root / "sys" / "devices" / "system" / "cpu"
    packages: set[str] = set()
    cores: set[tuple[str, str]] = set()
    logical = 0
    for cpu in sorted(cpu_dir.glob("cpu[0-9]*")):
        package = read_text(cpu / "topology" / "physical_package_id")
        core = read_text(cpu / "topology" / "core_id")
        if package is None:
            continue
        logical += 1
        packages.add(package)
        cores.add((package, core or ""))
    cpuinfo = read_text(root / "proc" / "cpuinfo")
    return {"model": cpu_model(root), "cpu_id": cpu_identity(cpuinfo), "isa": isa_level(cpuinfo),
            "logical_cpus": logical or os.cpu_count(), "sockets": len(packages) or None,
            "physical_cores": len(cores) or None, "usable_cpus": usable_cpus(), "numa": numa_nodes(root),
            "isa_flags": isa_flags(root)}


#: The instruction-set extensions that decide which kernels oneDNN, MKL and ATen run (vector width, FMA, bf16 and
#: int8 dot products, matrix tiles), by their /proc/cpuinfo names on x86 (flags) and Arm (Features).
ISA_PREFIXES = ("sse4", "avx", "fma", "f16c", "amx", "sve", "asimd", "bf16", "i8mm", "vsx", "altivec")


def isa_flags(root: Path = Path("/")) -> list[str]:
    """The vector and matrix extensions this CPU reports (first processor's `flags` or `Features`), sorted."""
    for line in (read_text(root / "proc" / "cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return sorted({flag for flag in value.split() if flag.startswith(ISA_PREFIXES)})
    return []
