"""NVIDIA GPUs through `nvidia-smi`, queried once per process, and their NUMA nodes from PCI sysfs."""
from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import Any

from dlrun.probe.sysfs import read_text
from dlrun.probe.tools import tool_output

QUERY = "index,name,memory.total,pci.bus_id,uuid,driver_version"


def pci_numa_node(bus_id: str, root: Path = Path("/")) -> int | None:
    """NUMA node of a PCI device from sysfs (nvidia-smi prints 00000000:3B:00.0; sysfs wants 0000:3b:00.0)."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    text = read_text(root / "sys" / "bus" / "pci" / "devices" / f"{domain[-4:]}:{rest}" / "numa_node")
    try:
        node = int(text) if text is not None else -1
    except ValueError:
        return None
    return node if node >= 0 else None


def parse_gpu_query(text: str, root: Path = Path("/")) -> list[dict[str, Any]]:
    """Rows of `nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 6 or not parts[0].isdigit():
            continue
        try:
            memory_mib = float(parts[2])
        except ValueError:
            memory_mib = None
        gpus.append({"index": int(parts[0]), "name": parts[1], "memory_mib": memory_mib, "pci_bus_id": parts[3],
                     "uuid": parts[4], "driver": parts[5], "numa_node": pci_numa_node(parts[3], root)})
    return gpus


@functools.lru_cache(maxsize=1)
def gpus() -> tuple[dict[str, Any], ...]:
    """This node's GPUs (empty without nvidia-smi): one nvidia-smi call for the life of the process."""
    out = tool_output(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"], timeout=30)
    return tuple(parse_gpu_query(out)) if out else ()


def gpu_inventory(topology: bool = False) -> dict[str, Any]:
    """GPUs as the node inventory records them; `topology` adds `nvidia-smi topo -m` (doctor only)."""
    found = [dict(gpu) for gpu in gpus()]
    inventory: dict[str, Any] = {"nvidia_smi": shutil.which("nvidia-smi") is not None, "gpus": found}
    if topology and found:
        inventory["topology"] = tool_output(["nvidia-smi", "topo", "-m"], timeout=30)
    return inventory
