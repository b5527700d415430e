"""What a node's links look like: `nvidia-smi topo -m`, PCIe speed and width of every GPU and RDMA NIC as
trained and as possible (sysfs `current_link_*`/`max_link_*`, the slowest hop up to the root port), their
NUMA nodes, InfiniBand/RoCE ports (state and rate), which NIC each GPU is paired with; a summary of it that
a hardware fingerprint can include, the problems `doctor` warns about, and the bus bandwidth the detected
path allows a collective.

Parsers take text as the tools and the kernel print it (see tests/data/telemetry for real outputs); the raw
facts are read by dlrun.probe.telemetry_gpu, which the sampler also runs on every node of a job.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from dlrun.probe.telemetry_gpu import collect_links, nvidia_smi_topology

#: PCIe transfer rate per lane (GT/s) -> generation; 128b/130b encoding from Gen3 on (8b/10b before).
PCIE_GENERATIONS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
#: Usable GB/s per lane and direction: GT/s x encoding / 8 bits (PCI Express Base Specification: 2.5 and
#: 5.0 GT/s with 8b/10b, 8.0 to 32.0 GT/s with 128b/130b; 6.0's 64 GT/s with FLIT mode taken as 242/256).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 8.0 * 128 / 130 / 8, 4: 16.0 * 128 / 130 / 8, 5: 32.0 * 128 / 130 / 8,
                  6: 64.0 * 242 / 256 / 8}
#: GB/s per NVLink and direction, by GPU family, with where it is published (the datasheet's total is both
#: directions over all of a GPU's links).
NVLINK = {
    "P100": (20.0, "NVIDIA Tesla P100 datasheet: NVLink 160 GB/s over 4 links, both directions"),
    "V100": (25.0, "NVIDIA Tesla V100 datasheet: NVLink 300 GB/s over 6 links, both directions"),
    "A100": (25.0, "NVIDIA A100 datasheet: NVLink 600 GB/s over 12 links, both directions"),
    "H100": (25.0, "NVIDIA H100 datasheet: NVLink 900 GB/s over 18 links, both directions"),
    "H200": (25.0, "NVIDIA H200 datasheet: NVLink 900 GB/s over 18 links, both directions"),
    "B200": (50.0, "NVIDIA Blackwell datasheet: NVLink 1.8 TB/s over 18 links, both directions"),
}
#: `nvidia-smi topo -m` connection kinds, nearest first.
PATH_ORDER = ("X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS")
_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+|[a-z][a-z0-9_]*\d)$")


# --- nvidia-smi topo -m ----------------------------------------------------------------------------------

def parse_topo_matrix(text: str) -> dict[str, Any]:
    """`nvidia-smi topo -m` (or -mp) -> {"devices", "links": {"A B": kind}, "cpu_affinity", "numa_affinity",
    "nic_legend"}. Device names come from the rows (a header may run two names together), cells are
    whitespace-separated, and the columns after the matrix are CPU and NUMA affinity."""
    rows: list[list[str]] = []
    legend: dict[str, str] = {}
    in_matrix = False
    for line in text.splitlines():
        words = line.split()
        if words and words[0].startswith("GPU0") and not in_matrix:
            in_matrix = True
            continue
        if in_matrix and words and _DEVICE.match(words[0]) and not line.startswith(" " * 2 + words[0] + ":"):
            rows.append(words)
        elif in_matrix and rows and not words:
            in_matrix = False
        match = re.match(r"^\s+(NIC\d+):\s*(\S+)\s*$", line)
        if match:
            legend[match.group(1)] = match.group(2)
    names = [legend.get(row[0], row[0]) for row in rows]
    links: dict[str, str] = {}
    affinity: dict[str, str] = {}
    numa: dict[str, str] = {}
    for name, row in zip(names, rows):
        cells = row[1:1 + len(names)]
        for other, cell in zip(names, cells):
            if other != name:
                links[f"{name} {other}"] = cell
        rest = row[1 + len(names):]
        if name.startswith("GPU") and rest:
            affinity[name] = rest[0]
            if len(rest) > 1:
                numa[name] = rest[1]
    return {"devices": names, "links": links, "cpu_affinity": affinity, "numa_affinity": numa, "nic_legend": legend}


def path_rank(kind: str) -> int:
    return PATH_ORDER.index("NV") if kind.startswith("NV") else (PATH_ORDER.index(kind) if kind in PATH_ORDER
                                                                  else len(PATH_ORDER))


def gpu_nic_pairs(matrix: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """GPU -> (its nearest NIC, the connection), from a parsed topo -m."""
    gpus = [d for d in matrix["devices"] if d.startswith("GPU")]
    nics = [d for d in matrix["devices"] if not d.startswith("GPU")]
    pairs = {}
    for gpu in gpus:
        choices = [(path_rank(matrix["links"].get(f"{gpu} {nic}", "SYS")), nic) for nic in nics]
        if choices:
            _, nic = min(choices)
            pairs[gpu] = (nic, matrix["links"].get(f"{gpu} {nic}", "SYS"))
    return pairs


def nvlinks_between_gpus(matrix: dict[str, Any]) -> list[int]:
    """The NVLink count of every GPU pair (0: no NVLink), sorted."""
    gpus = [d for d in matrix["devices"] if d.startswith("GPU")]
    counts = []
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            kind = matrix["links"].get(f"{a} {b}", "")
            counts.append(int(kind[2:]) if re.match(r"^NV\d+$", kind) else 0)
    return sorted(counts)


# --- sysfs -------------------------------------------------------------------------------------------------

def pcie_generation(speed: str | None) -> int | None:
    """`16.0 GT/s PCIe` (or `8 GT/s`, older kernels) -> 4; None for `Unknown` or nothing."""
    match = re.match(r"^\s*([\d.]+)\s*GT/s", speed or "")
    return PCIE_GENERATIONS.get(float(match.group(1))) if match else None


def link_width(text: str | None) -> int | None:
    text = (text or "").strip().lstrip("x")
    return int(text) if text.isdigit() and 0 < int(text) <= 32 else None


def pcie_link(raw: dict[str, Any]) -> dict[str, Any]:
    """One device's link: its own generation and width (trained, maximum), and the path's: the slowest
    trained hop up to the root port (`trained_*`) and the slowest possible one (`possible_*`)."""
    hops = [raw] + [h for h in raw.get("upstream") or [] if isinstance(h, dict)]
    def lowest(key: str, convert) -> int | None:
        values = [convert(h.get(key)) for h in hops]
        values = [v for v in values if v]
        return min(values) if values else None
    numa = (raw.get("numa_node") or "").strip()
    return {"gen": pcie_generation(raw.get("current_link_speed")), "width": link_width(raw.get("current_link_width")),
            "max_gen": pcie_generation(raw.get("max_link_speed")), "max_width": link_width(raw.get("max_link_width")),
            "trained_gen": lowest("current_link_speed", pcie_generation),
            "trained_width": lowest("current_link_width", link_width),
            "possible_gen": lowest("max_link_speed", pcie_generation),
            "possible_width": lowest("max_link_width", link_width),
            "numa_node": int(numa) if numa.lstrip("-").isdigit() and int(numa) >= 0 else None}


def ib_rate_gbps(rate: str | None) -> float | None:
    """`100 Gb/sec (4X EDR)` -> 100.0."""
    match = re.match(r"^\s*([\d.]+)\s*Gb/sec", rate or "")
    return float(match.group(1)) if match else None


def port_state(text: str | None) -> str | None:
    """`4: ACTIVE` -> ACTIVE."""
    return (text or "").split(":", 1)[-1].strip().upper() or None


def parse_ibstatus(text: str) -> list[dict[str, Any]]:
    """`ibstatus` (which prints the sysfs files of every port) -> one record per port."""
    ports: list[dict[str, Any]] = []
    for line in text.splitlines():
        match = re.match(r"^Infiniband device '([^']+)' port (\d+) status:", line)
        if match:
            ports.append({"device": match.group(1), "port": int(match.group(2))})
            continue
        key, sep, value = line.strip().partition(":")
        if ports and sep and key in ("state", "phys state", "rate", "link_layer"):
            ports[-1][key.replace(" ", "_")] = value.strip()
    return [port_record(p["device"], p["port"], p) for p in ports]


def port_record(device: str, port: Any, raw: dict[str, Any]) -> dict[str, Any]:
    return {"device": device, "port": int(port) if str(port).isdigit() else port,
            "state": port_state(raw.get("state")), "phys_state": port_state(raw.get("phys_state")),
            "rate_gbps": ib_rate_gbps(raw.get("rate")), "link_layer": raw.get("link_layer")}


def node_topology(links: dict[str, Any] | None, topo_m: str | None) -> dict[str, Any]:
    """A node's topology from the raw facts (telemetry_gpu.collect_links, `nvidia-smi topo -m` text)."""
    links = links if isinstance(links, dict) else {}
    gpus = {pci: pcie_link(raw) for pci, raw in sorted((links.get("gpus") or {}).items()) if isinstance(raw, dict)}
    nics = {}
    for name, raw in sorted((links.get("nics") or {}).items()):
        if isinstance(raw, dict):
            ports = [port_record(name, port, p) for port, p in sorted((raw.get("ports") or {}).items())
                     if isinstance(p, dict)]
            nics[name] = {"pci": raw.get("pci"), "link": pcie_link(raw.get("link") or {}), "ports": ports}
    return {"gpus": gpus, "nics": nics, "matrix": parse_topo_matrix(topo_m) if topo_m else None}


def probe_topology(root: str | Path = "/", with_nvidia_smi: bool = True) -> dict[str, Any]:
    """This node's topology (links from sysfs; `nvidia-smi topo -m` where there is an nvidia-smi)."""
    return node_topology(collect_links(str(root)), nvidia_smi_topology() if with_nvidia_smi else None)


# --- what the topology means ---------------------------------------------------------------------------------

def _active_ports(nic: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in nic["ports"] if p.get("state") == "ACTIVE"]


def summarize_node(topo: dict[str, Any]) -> dict[str, Any]:
    """The stable part of a node's topology (what a hardware fingerprint compares): per GPU its path's
    possible PCIe generation and its trained and possible widths (not the trained speed: an idle GPU lowers
    it), NUMA node and nearest NIC; the GPU pairs' NVLinks; per NIC its rate, width and NUMA node."""
    matrix = topo.get("matrix") or {"devices": [], "links": {}}
    pairs = gpu_nic_pairs(matrix) if matrix["devices"] else {}
    gpus = []
    for index, (pci, link) in enumerate(sorted(topo.get("gpus", {}).items())):
        nic = pairs.get(f"GPU{index}")
        gpus.append({"pci": pci, "pcie_gen": link["possible_gen"], "pcie_width": link["trained_width"],
                     "pcie_max_width": link["possible_width"], "numa": link["numa_node"],
                     "nic": f"{nic[0]} {nic[1]}" if nic else None})
    nics = [{"name": name, "ports": len(_active_ports(nic)),
             "rate_gbps": max((p["rate_gbps"] or 0 for p in _active_ports(nic)), default=None),
             "pcie_gen": nic["link"]["possible_gen"], "pcie_width": nic["link"]["trained_width"],
             "numa": nic["link"]["numa_node"]} for name, nic in sorted(topo.get("nics", {}).items())]
    nvlinks = nvlinks_between_gpus(matrix) if matrix["devices"] else []
    return {"gpus": gpus, "nics": nics,
            "gpu_nvlinks": {"min": nvlinks[0], "max": nvlinks[-1]} if nvlinks else None}


def topology_summary(inventory: dict[str, Any]) -> dict[str, Any]:
    """The topology part of a hardware fingerprint, from a node inventory (`topology`, and the job's
    nodes as their samplers saw them in `nodes_topology`): one summary when every node looks the same,
    else one per node."""
    per_node = {str(name): summarize_node(topo) for name, topo in sorted((inventory.get("nodes_topology")
                                                                       or {}).items()) if isinstance(topo, dict)}
    if not per_node and isinstance(inventory.get("topology"), dict):
        per_node = {str(inventory.get("hostname") or "node"): summarize_node(inventory["topology"])}
    distinct = {repr(summary) for summary in per_node.values()}
    if len(distinct) == 1:
        return {"nodes": len(per_node), "node": next(iter(per_node.values()))}
    return {"nodes": len(per_node), "per_node": per_node}


def topology_problems(topo: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(check, message, fix) for what makes a node slower than it should be: a link trained narrower than
    it can be (or, for NICs, slower), a GPU whose nearest NIC is on the other socket, an RDMA port not
    ACTIVE. A GPU's link speed is not judged: idle GPUs lower it to save power."""
    problems = []
    devices = [(f"GPU at {pci}", link, False) for pci, link in topo.get("gpus", {}).items()]
    devices += [(f"NIC {name} ({nic.get('pci')})", nic["link"], True) for name, nic in topo.get("nics", {}).items()]
    for what, link, judge_speed in devices:
        if link["trained_width"] and link["possible_width"] and link["trained_width"] < link["possible_width"]:
            problems.append(("pcie-link", f"{what}: PCIe link trained at x{link['trained_width']} of "
                             f"x{link['possible_width']}", "reseat the card or check the slot and riser"))
        elif judge_speed and link["trained_gen"] and link["possible_gen"] and link["trained_gen"] < link["possible_gen"]:
            problems.append(("pcie-link", f"{what}: PCIe link trained at Gen{link['trained_gen']} of "
                             f"Gen{link['possible_gen']}", "check the slot's PCIe setting in the firmware"))
    matrix = topo.get("matrix")
    for gpu, (nic, kind) in sorted(gpu_nic_pairs(matrix).items() if matrix else []):
        if kind == "SYS":
            problems.append(("gpu-nic", f"{gpu}'s nearest NIC {nic} is on the other socket (SYS): its GPUDirect "
                             "RDMA traffic crosses the CPUs' interconnect", "use a NIC on the GPU's socket"))
    for name, nic in sorted(topo.get("nics", {}).items()):
        for port in nic["ports"]:
            if port.get("state") and port["state"] != "ACTIVE":
                problems.append(("rdma-port", f"{name} port {port['port']} is {port['state']} "
                                 f"(physical state {port.get('phys_state')})",
                                 "check the cable and the subnet manager (IB) or the switch port"))
    return problems


def _nvlink_family(gpu_name: str | None) -> str | None:
    return next((family for family in NVLINK if family in (gpu_name or "")), None)


def expected_busbw(topo: dict[str, Any] | None, *, nodes: int, gpu_name: str | None,
                   device: str) -> dict[str, Any]:
    """The bus bandwidth (GB/s) the detected path allows: between the GPUs of a node their NVLinks (the
    fewest of any pair, x the GPU family's per-link rate) or else their PCIe links (the slowest GPU's
    trained width at its possible generation); across nodes, at most the node's ACTIVE RDMA ports' line
    rate. `why` instead of a value when the path is not one of these."""
    if device != "cuda":
        return {"value": None, "why": "a CPU collective's path (shared memory, sockets) has no link rate to expect"}
    if not topo:
        return {"value": None, "why": "the node's topology was not recorded"}
    bounds: list[tuple[float, str, str]] = []
    matrix = topo.get("matrix")
    links = nvlinks_between_gpus(matrix) if matrix and matrix.get("devices") else []
    family = _nvlink_family(gpu_name)
    if links and links[0] > 0 and family:
        rate, source = NVLINK[family]
        bounds.append((links[0] * rate, f"NVLink ({family}) x {links[0]} per GPU pair", source))
    else:
        widths = [(link["possible_gen"], link["trained_width"]) for link in topo.get("gpus", {}).values()]
        widths = [(g, w) for g, w in widths if g and w]
        if widths:
            gen, width = min(widths, key=lambda gw: PCIE_LANE_GBPS[gw[0]] * gw[1])
            bounds.append((PCIE_LANE_GBPS[gen] * width, f"PCIe Gen{gen} x{width}",
                           "PCI Express Base Specification: per-lane rate and encoding"))
    if nodes > 1:
        ports = [p for nic in topo.get("nics", {}).values() for p in _active_ports(nic) if p.get("rate_gbps")]
        if ports:
            total = sum(p["rate_gbps"] for p in ports) / 8
            bounds.append((total, f"{len(ports)} RDMA port(s), {total * 8:g} Gb/s per node",
                           "the ports' rate in /sys/class/infiniband"))
    if not bounds:
        return {"value": None, "why": "no NVLink, PCIe or RDMA link of the path could be read"}
    value, path, source = min(bounds)
    return {"value": round(value, 2), "unit": "GB/s", "path": path, "source": source}
