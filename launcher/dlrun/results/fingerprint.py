"""A run's hardware fingerprint: what machine its number was measured on, as data stored with the run.

    {"cpu": "AMD EPYC 9B45", "cpu_id": "AuthenticAMD family 26 model 2 stepping 1",
     "isa": "x86-64-v4+avx512_bf16+avx512_vnni", "sockets": 2, "cores_per_socket": 64, "memory_gib": 1511,
     "gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "gpu_memory_gib": 80, "driver": "580.65.06",
     "device": "cuda", "cuda": "12.8", "cudnn": "91002", "nccl": "2.27.3",
     "fabric": "ib", "fabric_rate_gbps": 200.0, "nodes": 2, "node_from": "job"}

The node's part (CPU model, its identity and instruction-set level, sockets x cores, memory, GPUs, driver,
fabric line rate) comes from what the job
itself reported (`node` in the harness's result: the node it ran on, also under a batch scheduler), else from
the node inventory dlrun took before launching (`inventory.json`: the same node for a local run, which is the
only case it is used for). The software part (CUDA, cuDNN, NCCL) is what the job saw: the versions its
framework reported, else those its image pins. A value nobody reported is None, and the comparability key
(dlrun.results.key) reads None as `unknown`. CPU model names are shortened to what identifies the part
("Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.0GHz" -> "Intel Xeon Platinum 8480+").

`topology` is the topology summary of the job's nodes (dlrun.probe.topology.topology_summary: GPUs' PCIe
links and nearest NICs, NVLinks, NIC rates; one summary when every node looks the same), where it was
captured: shown with the machine, not part of the key (two nodes of one machine type may train links
differently, which is worth seeing, not a different machine).

Fingerprints from elsewhere (a bundle from another site) are data: `checked` keeps the known fields with
values of the right type and bounded length, and drops everything else.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

#: The fields a fingerprint may hold, and their types.
FIELDS: dict[str, tuple[type, ...]] = {
    "cpu": (str,), "cpu_id": (str,), "isa": (str,), "sockets": (int,), "cores_per_socket": (int,),
    "memory_gib": (int,), "gpu": (str,),
    "gpu_count": (int,), "gpu_memory_gib": (int,), "driver": (str,), "device": (str,), "cuda": (str,),
    "cudnn": (str,), "nccl": (str,), "fabric": (str,), "fabric_rate_gbps": (int, float), "nodes": (int,),
    "node_from": (str,), "topology": (dict,), "arch": (str,), "emulated_on": (str,),
}
#: The longest text value kept (a CPU or GPU model name, a version), and the largest topology summary (bytes
#: of JSON).
MAX_TEXT = 120
MAX_TOPOLOGY = 16 << 10
_NOISE = re.compile(r"\((?:R|TM|tm|r)\)|\bCPU\b|\bProcessor\b|\b\d+-Core\b|@\s*[\d.]+\s*[GM]Hz|\bwith Radeon.*$")
_RATE = re.compile(r"([\d.]+)\s*Gb/s")
_DRIVER = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+([\d.]+)")


def short_cpu_name(model: str | None) -> str | None:
    """A CPU model name without trademarks, clock and core count: what identifies the part."""
    if not model:
        return None
    text = " ".join(_NOISE.sub(" ", model).split())
    return text or model.strip() or None


def driver_version(proc_text: str | None) -> str | None:
    """The NVIDIA driver's version from /proc/driver/nvidia/version."""
    match = _DRIVER.search(proc_text or "")
    return match.group(1) if match else None


def _port_rate(rate: Any) -> float | None:
    """Gb/s from sysfs's port rate ("200 Gb/sec (4X HDR)")."""
    match = _RATE.search(str(rate or "").replace("Gb/sec", "Gb/s"))
    return float(match.group(1)) if match else None


def _nic_speeds(fabrics: Mapping[str, Any]) -> list[float]:
    """Gb/s of the node's physical Ethernet NICs that are up."""
    speeds = []
    for nic in fabrics.get("interfaces") or []:
        usable = isinstance(nic, Mapping) and not nic.get("virtual") and nic.get("type") == "ethernet"
        speed = _number(nic.get("speed_mbps")) if usable and nic.get("operstate") in ("up", "unknown") else None
        if speed and speed > 0:
            speeds.append(speed / 1000)
    return speeds


def _port_rates(fabrics: Mapping[str, Any], fabric: str) -> list[float]:
    """Gb/s of the active RDMA ports of `fabric` (ib and roce: InfiniBand or Ethernet link layer on non-hfi1
    devices; opa: hfi1 devices)."""
    layer = "Ethernet" if fabric == "roce" else "InfiniBand"
    rates = []
    for device in fabrics.get("rdma_devices") or []:
        if not isinstance(device, Mapping) or str(device.get("name", "")).startswith("hfi1") != (fabric == "opa"):
            continue
        for port in device.get("ports") or []:
            active = isinstance(port, Mapping) and "ACTIVE" in str(port.get("state") or "").upper()
            if active and (fabric == "opa" or port.get("link_layer") == layer):
                rate = _port_rate(port.get("rate"))
                rates += [rate] if rate else []
    return rates


def fabric_rate(fabrics: Mapping[str, Any] | None, fabric: str | None) -> float | None:
    """The line rate in Gb/s of one port of `fabric` (the fastest active one) in a node's fabrics record
    (`detect_fabrics`' shape: rdma_devices with ports, interfaces with speed_mbps)."""
    if not isinstance(fabrics, Mapping) or not fabric:
        return None
    rates = _nic_speeds(fabrics) if fabric == "tcp" else _port_rates(fabrics, fabric)
    return max(rates) if rates else None


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _gib(value: Any, per_gib: float) -> int | None:
    number = _number(value)
    return int(round(number / per_gib)) if number and number > 0 else None


def arch_fields(node: Mapping[str, Any]) -> dict[str, Any]:
    """The architecture a job's code ran as, and the node CPU's where that was emulated (the harness's
    detection: dlrun.harness.harness_node.arch_facts)."""
    emulated = node.get("emulated") is True
    return {"arch": node.get("arch"), "emulated_on": node.get("host_arch") if emulated else None}


def _from_job(node: Mapping[str, Any]) -> dict[str, Any]:
    """The node's part from the harness's `node` record (dlrun.harness.harness_common.node_facts)."""
    sockets, cores = node.get("sockets"), node.get("physical_cores")
    gpus = [g for g in node.get("gpus") or [] if isinstance(g, Mapping)]
    return {"cpu": short_cpu_name(node.get("cpu_model")), "cpu_id": node.get("cpu_id"), "isa": node.get("isa"),
            "sockets": sockets,
            "cores_per_socket": cores // sockets if isinstance(cores, int) and isinstance(sockets, int) and sockets
            else None, "memory_gib": _gib(node.get("memory_kib"), 1024 ** 2),
            "gpu": gpus[0].get("name") if gpus else None,
            "gpu_count": node.get("gpus_on_node") or (len(gpus) if "gpus" in node else None),
            "gpu_memory_gib": _gib(gpus[0].get("memory_mib"), 1024) if gpus else None,
            "driver": node.get("driver"), "fabrics": node.get("fabrics"), **arch_fields(node)}


def _from_inventory(inventory: Mapping[str, Any]) -> dict[str, Any]:
    """The node's part from a node inventory (dlrun.probe.host.node_inventory)."""
    cpu = inventory.get("cpu") if isinstance(inventory.get("cpu"), Mapping) else {}
    gpu = inventory.get("gpu") if isinstance(inventory.get("gpu"), Mapping) else {}
    gpus = [g for g in gpu.get("gpus") or [] if isinstance(g, Mapping)]
    sockets, cores = cpu.get("sockets"), cpu.get("physical_cores")
    return {"cpu": short_cpu_name(cpu.get("model")), "cpu_id": cpu.get("cpu_id"), "isa": cpu.get("isa"),
            "sockets": sockets,
            "cores_per_socket": cores // sockets if isinstance(cores, int) and isinstance(sockets, int) and sockets
            else None, "memory_gib": _gib(inventory.get("memory_kib"), 1024 ** 2) if inventory.get("memory_kib")
            else _gib(inventory.get("memory_gb"), 1.0),
            "gpu": gpus[0].get("name") if gpus else None, "gpu_count": len(gpus) if "gpus" in gpu else None,
            "gpu_memory_gib": _gib(gpus[0].get("memory_mib"), 1024) if gpus else None,
            "driver": gpus[0].get("driver") if gpus else None, "fabrics": inventory.get("fabrics"),
            "arch": inventory.get("arch")}


def fingerprint_of(*, result: Mapping[str, Any] | None, inventory: Mapping[str, Any] | None,
                   image: Mapping[str, Any] | None = None, fabric: str | None = None, nodes: int | None = None,
                   declared_rate_gbps: float | None = None,
                   topology: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The fingerprint of a run from its result (the harness's `extra`, or a parser's), the inventory of the
    node it ran on (None where dlrun did not run on that node: a batch job), the image record of its plan
    (its pinned CUDA stack), its fabric and node count, and the fabric's line rate its system profile
    declares (used where the node does not say: a virtual NIC reports no speed)."""
    extra = result.get("extra") if isinstance(result, Mapping) and isinstance(result.get("extra"), Mapping) \
        else (result or {})
    node = extra.get("node") if isinstance(extra.get("node"), Mapping) else None
    part = _from_job(node) if node else _from_inventory(inventory) if isinstance(inventory, Mapping) else {}
    image = image or {}
    device = extra.get("device") if extra.get("device") in ("cpu", "cuda") else None
    found: dict[str, Any] = {
        **{name: part.get(name) for name in ("cpu", "cpu_id", "isa", "sockets", "cores_per_socket", "memory_gib", "gpu",
                                             "gpu_count", "gpu_memory_gib", "driver", "arch", "emulated_on")},
        "device": device,
        "cuda": _text(extra.get("cuda_version") or image.get("cuda")),
        "cudnn": _text(extra.get("cudnn_version") or image.get("cudnn")),
        "nccl": _text(extra.get("nccl_version") or image.get("nccl")),
        "fabric": fabric,
        "fabric_rate_gbps": (fabric_rate(part.get("fabrics"), fabric) if fabric else None) or declared_rate_gbps,
        "nodes": nodes, "node_from": "job" if node else "inventory" if part else None,
    }
    if topology:  # the topology summary of dlrun.probe.topology, once runs capture it (issue 20)
        found["topology"] = dict(topology)
    return checked(found) or {}


def this_machine(*, fabric: str | None, nodes: int | None, device: str | None) -> dict[str, Any]:
    """The fingerprint a run on this node would record, as far as the node decides it (no CUDA stack: only
    the job tells which it saw)."""
    from dlrun.probe.host import machine_inventory

    return checked({**fingerprint_of(result=None, inventory=machine_inventory(), fabric=fabric, nodes=nodes),
                    "device": device}) or {}


def _text(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


def checked(data: Any) -> dict[str, Any] | None:
    """The known fields of `data` with values of the right type (text bounded); None when nothing is left."""
    if not isinstance(data, Mapping):
        return None
    out: dict[str, Any] = {}
    for name, types in FIELDS.items():
        value = data.get(name)
        if isinstance(value, bool) or not isinstance(value, types):
            continue
        if isinstance(value, str):
            value = " ".join(value.split())[:MAX_TEXT]
        if name == "topology" and len(json.dumps(value, default=str)) > MAX_TOPOLOGY:
            continue
        out[name] = value
    return out or None


def _count(n: Any, what: str) -> str:
    return f"{n} {what}" if isinstance(n, int) else f"? {what}"


def _cpu_line(fp: Mapping[str, Any]) -> str:
    layout = (f"{fp['sockets']} x {fp['cores_per_socket']} cores"
              if isinstance(fp.get("sockets"), int) and isinstance(fp.get("cores_per_socket"), int) else "cores unknown")
    memory = f"{fp['memory_gib']} GiB" if fp.get("memory_gib") else "memory unknown"
    identity = f" ({fp['cpu_id']}; {fp.get('isa') or 'instruction set unknown'})" if fp.get("cpu_id") else ""
    arch = f", {arch_label(fp)}" if fp.get("arch") else ""
    return f"{fp.get('cpu') or 'unknown CPU'}{identity}, {layout}, {memory}{arch}"


def arch_label(fp: Mapping[str, Any]) -> str | None:
    """`x86_64`, or `ppc64le emulated on x86_64`; None where the run did not record it."""
    if not fp.get("arch"):
        return None
    return f"{fp['arch']} emulated on {fp['emulated_on']}" if fp.get("emulated_on") else fp["arch"]


def _gpu_line(fp: Mapping[str, Any]) -> str:
    if fp.get("gpu_count") == 0:
        return "none"
    if not (fp.get("gpu") or fp.get("gpu_count")):
        return "unknown"
    size = f", {fp['gpu_memory_gib']} GiB each" if fp.get("gpu_memory_gib") else ""
    return (f"{_count(fp.get('gpu_count'), 'x')} {fp.get('gpu') or 'unknown GPU'}{size}, "
            f"driver {fp.get('driver') or 'unknown'}")


def describe(fp: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """(label, text) lines for `dlrun results show`: what the machine was, `unknown` where nobody said."""
    if not fp:
        return [("machine", "unknown (recorded before dlrun kept fingerprints, or from a log that does not say)")]
    lines = [("cpu", _cpu_line(fp)), ("gpu", _gpu_line(fp))]
    if fp.get("device") == "cuda":
        lines.append(("cuda stack", f"CUDA {fp.get('cuda') or 'unknown'}, cuDNN {fp.get('cudnn') or 'unknown'}, "
                                    f"NCCL {fp.get('nccl') or 'unknown'} (as the job saw them)"))
    if isinstance(fp.get("nodes"), int) and fp["nodes"] > 1:
        rate = f"{fp['fabric_rate_gbps']:g} Gb/s per port" if fp.get("fabric_rate_gbps") else "line rate unknown"
        lines.append(("fabric", f"{fp.get('fabric') or 'unknown'}, {rate}"))
    lines.append(("machine from", {"job": "what the job reported from its node",
                                   "inventory": "dlrun's inventory of the node (inventory.json)"}
                  .get(str(fp.get("node_from")), "unknown")))
    if isinstance(fp.get("topology"), Mapping):
        lines.append(("topology", ", ".join(f"{k}: {v}" for k, v in sorted(fp["topology"].items()))[:300]))
    return lines
