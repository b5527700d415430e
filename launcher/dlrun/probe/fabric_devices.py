"""Fabrics a node offers, read from sysfs and /dev: RDMA devices and ports (`/sys/class/infiniband`),
Omni-Path devices (`/dev/hfi1_*`), verbs devices (`/dev/infiniband`) and NICs (`/sys/class/net`).

The result is plain data; `config` holds, per usable fabric, the settings to use it (HCA:port names, the
interface for out-of-band traffic, the RoCE v2 GID index) in the shape of a system profile's
`fabric_config` entry."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dlrun.probe.sysfs import numeric_entries, read_text

#: Fabric names, best first.
FABRIC_ORDER = ("ib", "opa", "roce", "tcp")
#: Interfaces NCCL and gloo must never use for traffic between nodes.
VIRTUAL_IF_PREFIXES = ("lo", "docker", "veth", "virbr", "br-", "cni", "flannel", "cali", "tun", "tap", "ifb")


def pick_roce_gid_index(port_dir: Path) -> int | None:
    """The lowest GID index of type `RoCE v2` with an IPv4-mapped address (::ffff:a.b.c.d); else the lowest
    `RoCE v2` index with any routable (non-zero, non-link-local) address; else None."""
    fallback = None
    for index in numeric_entries(port_dir / "gids"):
        gid_type = read_text(port_dir / "gid_attrs" / "types" / str(index))
        gid = (read_text(port_dir / "gids" / str(index)) or "").lower()
        if gid_type is None or gid_type.lower() != "roce v2" or not gid.strip("0:"):
            continue
        if gid.startswith("0000:0000:0000:0000:0000:ffff:"):
            return index
        if fallback is None and not gid.startswith("fe80:"):
            fallback = index
    return fallback


def net_interfaces(root: Path) -> list[dict[str, Any]]:
    net = root / "sys" / "class" / "net"
    try:
        names = sorted(p.name for p in net.iterdir())
    except OSError:
        return []
    found = []
    for name in names:
        base = net / name
        if_type = read_text(base / "type")
        found.append({
            "name": name,
            "operstate": read_text(base / "operstate"),
            "type": "infiniband" if if_type == "32" else ("loopback" if if_type == "772" else "ethernet"),
            "virtual": name.startswith(VIRTUAL_IF_PREFIXES) or not (base / "device").exists(),
            "mtu": read_text(base / "mtu"),
            "speed_mbps": read_text(base / "speed"),
            "address": read_text(base / "address"),
        })
    return found


def _port(port_dir: Path, port: int) -> dict[str, Any]:
    link_layer = read_text(port_dir / "link_layer")
    entry: dict[str, Any] = {"port": port, "link_layer": link_layer, "state": read_text(port_dir / "state"),
                             "rate": read_text(port_dir / "rate")}
    if link_layer == "Ethernet":
        entry["roce_v2_gid_index"] = pick_roce_gid_index(port_dir)
        ndevs = {read_text(port_dir / "gid_attrs" / "ndevs" / str(i)) for i in numeric_entries(port_dir / "gids")}
        entry["netdevs"] = sorted(ndevs - {None, ""})  # type: ignore[type-var]
    return entry


def rdma_devices(root: Path) -> list[dict[str, Any]]:
    base = root / "sys" / "class" / "infiniband"
    try:
        names = sorted(p.name for p in base.iterdir())
    except OSError:
        return []
    devices = []
    for name in names:
        ports = [_port(base / name / "ports" / str(port), port) for port in numeric_entries(base / name / "ports")]
        try:
            netdevs = sorted(p.name for p in (base / name / "device" / "net").iterdir())
        except OSError:
            netdevs = []
        numa = read_text(base / name / "device" / "numa_node")  # -1: the platform does not say
        devices.append({"name": name, "ports": ports, "netdevs": netdevs,
                        "board_id": read_text(base / name / "board_id"), "fw_ver": read_text(base / name / "fw_ver"),
                        "numa_node": int(numa) if numa and numa.lstrip("-").isdigit() and int(numa) >= 0 else None})
    return devices


def _active(port: dict[str, Any]) -> bool:
    return "ACTIVE" in (port.get("state") or "").upper()


def _ports(ib: list[dict[str, Any]], keep) -> list[tuple[dict, dict]]:
    return [(d, p) for d in ib for p in d["ports"] if _active(p) and keep(d, p)]


def _hcas(ports: list[tuple[dict, dict]]) -> list[str]:
    return [f"{d['name']}:{p['port']}" for d, p in ports]


def _is_opa(device: dict[str, Any]) -> bool:
    return device["name"].startswith("hfi1")


def _roce_config(ib: list[dict[str, Any]]) -> dict | None:
    ports = _ports(ib, lambda d, p: p["link_layer"] == "Ethernet" and p.get("roce_v2_gid_index") is not None)
    if not ports:
        return None
    dev, port = ports[0]
    netdevs = port.get("netdevs") or dev["netdevs"]
    return {"hca": _hcas(ports), "interfaces": netdevs[:1], "gid_index": port["roce_v2_gid_index"]}


def _configs(ib: list[dict[str, Any]], hfi_nodes: list[str], up_nics: list[dict[str, Any]]) -> dict[str, dict]:
    """Per usable fabric, the settings to use it (the shape of a system profile's `fabric_config` entry)."""
    configs: dict[str, dict | None] = {}
    ipoib = [n["name"] for n in up_nics if n["type"] == "infiniband"][:1]
    ib_ports = _ports(ib, lambda d, p: not _is_opa(d) and p["link_layer"] == "InfiniBand")
    if ib_ports:
        configs["ib"] = {"hca": _hcas(ib_ports), "interfaces": ipoib}
    opa_ports = _ports(ib, lambda d, p: _is_opa(d))
    if opa_ports or hfi_nodes:
        configs["opa"] = {"hca": _hcas(opa_ports) or [f"{h}:1" for h in hfi_nodes], "interfaces": ipoib}
    configs["roce"] = _roce_config(ib)
    configs["tcp"] = {"interfaces": [n["name"] for n in up_nics if n["type"] == "ethernet"][:1]}
    return {name: {k: v for k, v in cfg.items() if v != []} for name, cfg in configs.items() if cfg is not None}


def detect_fabrics(root: str | os.PathLike[str] = "/") -> dict[str, Any]:
    """What this node offers: RDMA devices, Omni-Path devices, NICs, and the fabrics they make usable
    (best first: ib, opa, roce, tcp), each with the settings to use it."""
    root = Path(root)
    ib = rdma_devices(root)
    try:
        hfi_nodes = sorted(p.name for p in (root / "dev").glob("hfi1_*"))
    except OSError:
        hfi_nodes = []
    uverbs = sorted(p.name for p in (root / "dev" / "infiniband").glob("uverbs*"))
    nics = net_interfaces(root)
    usable_nics = [n for n in nics if not n["virtual"] and n["type"] != "loopback"]
    up_nics = [n for n in usable_nics if n["operstate"] in ("up", "unknown")] or usable_nics
    configs = _configs(ib, hfi_nodes, up_nics)
    return {
        "rdma_devices": ib,
        "uverbs": uverbs,
        "hfi1_devices": hfi_nodes,
        "interfaces": nics,
        "usable": [name for name in FABRIC_ORDER if name in configs],
        "config": configs,
    }
