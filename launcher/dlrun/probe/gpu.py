"""NVIDIA GPUs through `nvidia-smi`, queried once per process, and their NUMA nodes from PCI sysfs."""
from __future__ import annotations

import functools
import re
import shutil
from pathlib import Path
from typing import Any

from dlrun.probe.sysfs import read_text
from dlrun.probe.tools import tool_output

QUERY = "index,name,memory.total,pci.bus_id,uuid,driver_version"
#: Asked on its own: nvidia-smi before driver 510 rejects the whole query for a field it does not know.
CAPABILITY_QUERY = "index,compute_cap"


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


def parse_capabilities(text: str | None) -> dict[int, str]:
    """{index: compute capability} from `nvidia-smi --query-gpu=index,compute_cap --format=csv,noheader`."""
    found = {}
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and re.fullmatch(r"\d+\.\d+", parts[1]):
            found[int(parts[0])] = parts[1]
    return found


@functools.lru_cache(maxsize=1)
def gpus() -> tuple[dict[str, Any], ...]:
    """This node's GPUs (empty without nvidia-smi), with each one's compute capability where nvidia-smi reports
    it: two nvidia-smi calls for the life of the process."""
    out = tool_output(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"], timeout=30)
    if not out:
        return ()
    found = parse_gpu_query(out)
    capabilities = parse_capabilities(tool_output(["nvidia-smi", f"--query-gpu={CAPABILITY_QUERY}",
                                                   "--format=csv,noheader"], timeout=30))
    return tuple({**gpu, "compute_cap": capabilities.get(gpu["index"])} for gpu in found)


def gpu_inventory(topology: bool = False) -> dict[str, Any]:
    """GPUs as the node inventory records them; `topology` adds `nvidia-smi topo -m` (doctor only)."""
    found = [dict(gpu) for gpu in gpus()]
    inventory: dict[str, Any] = {"nvidia_smi": shutil.which("nvidia-smi") is not None, "gpus": found}
    if topology and found:
        inventory["topology"] = tool_output(["nvidia-smi", "topo", "-m"], timeout=30)
    return inventory
