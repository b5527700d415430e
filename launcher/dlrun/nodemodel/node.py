"""A node of a system as the rules see it: sockets, cores, NUMA nodes, GPUs with their NUMA node and compute
capability, the NICs of each fabric with theirs, the driver. Built from a system profile (what the YAML holds;
`None` where it says nothing) or from this node's probed inventory (`dlrun doctor`).

NCCL's words for the path between a GPU and a NIC are used: PHB (both on one CPU's PCIe root, the traffic
goes through that CPU), SYS (across the interconnect between sockets: UPI, X-Bus). PIX/PXB (behind one PCIe
switch) are closer than PHB; from NUMA nodes alone a profile can tell "this socket" (PHB or closer) or "the
other socket" (SYS), which is what CPU binding and the GPUDirect level need.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlrun.catalog.models import SystemSpec

#: NCCL's path types, closest first (NCCL_NET_GDR_LEVEL's values, docs/env.rst).
PATHS = ("LOC", "PIX", "PXB", "PHB", "SYS")


@dataclass(frozen=True)
class Nics:
    """One fabric's NICs on a node: the NUMA node of each (None: not known), and the facts of the fabric."""

    fabric: str
    numa: tuple[int | None, ...] = ()
    rdma: bool = False
    gpudirect: bool | None = None  # GPUDirect RDMA works here (peer-memory driver loaded); None: unknown
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeModel:
    system: str
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    numa_nodes: int
    cpu_model: str | None = None
    gpu_model: str | None = None
    gpu_numa: tuple[int | None, ...] = ()  # per GPU index; empty: no GPUs
    compute_capability: str | None = None
    driver: str | None = None
    nics: dict[str, Nics] = field(default_factory=dict)
    #: where the facts come from: "profile <name>" or "this node (<host>)"
    origin: str = ""

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def gpus(self) -> int:
        return len(self.gpu_numa)

    def cores_of_numa(self, node: int) -> int:
        """Physical cores of one NUMA node (the profile's cores split evenly over its NUMA nodes)."""
        return max(self.cores // self.numa_nodes, 1)

    def socket_of_numa(self, node: int) -> int:
        """The socket a NUMA node belongs to (NUMA nodes numbered socket by socket)."""
        return node * self.sockets // self.numa_nodes if self.numa_nodes >= self.sockets else node

    def gpu_numa_known(self) -> bool:
        return bool(self.gpu_numa) and None not in self.gpu_numa

    def nic_numa(self, fabric: str) -> tuple[int | None, ...]:
        nics = self.nics.get(fabric)
        return nics.numa if nics else ()

    def gpu_nic_path(self, fabric: str, gpu: int) -> str | None:
        """PHB when a NIC of `fabric` shares the GPU's NUMA node, SYS when every NIC is on another; None when
        either side's NUMA node is not known."""
        numa = self.nic_numa(fabric)
        mine = self.gpu_numa[gpu] if gpu < len(self.gpu_numa) else None
        if mine is None or not numa or None in numa:
            return None
        return "PHB" if mine in numa else "SYS"

    def describe_numa(self, node: int) -> str:
        return (f"NUMA node {node} of {self.system} ({self.cores_of_numa(node)} cores"
                f"{': ' + self.cpu_model if self.cpu_model else ''}, socket {self.socket_of_numa(node)})")


def _fabric_nics(system: SystemSpec, fabric: str) -> Nics:
    config = system.fabric_config.get(fabric)  # type: ignore[call-overload]
    numa = tuple(config.numa_affinity) if config is not None and config.numa_affinity else ()
    return Nics(fabric=fabric, numa=numa, rdma=fabric != "tcp",
                gpudirect=config.gpudirect if config is not None else None,
                names=tuple(config.hca) if config is not None else ())


def node_model(system: SystemSpec) -> NodeModel:
    """The node model of a system profile."""
    cpu, gpus = system.cpu, system.gpus
    numa: tuple[int | None, ...] = ()
    if gpus is not None:
        numa = tuple(gpus.numa_affinity) if gpus.numa_affinity else (None,) * gpus.count_per_node
    return NodeModel(system=system.name, sockets=cpu.sockets, cores_per_socket=cpu.cores_per_socket,
                     threads_per_core=cpu.threads_per_core, numa_nodes=cpu.numa_nodes, cpu_model=cpu.model,
                     gpu_model=gpus.model if gpus else None, gpu_numa=numa,
                     compute_capability=gpus.compute_capability if gpus else None,
                     driver=gpus.driver if gpus else None,
                     nics={fabric: _fabric_nics(system, fabric) for fabric in system.fabrics},
                     origin=f"profile {system.name}" + (f", partition {system.partition}" if system.partition else ""))


def _count(value: Any, default: int) -> int:
    return max(int(value or default), 1)


def _live_nics(fabrics: dict[str, Any]) -> dict[str, Nics]:
    device_numa = {d["name"]: d.get("numa_node") for d in fabrics.get("rdma_devices") or []}
    nics = {}
    for fabric in fabrics.get("usable") or []:
        hcas = [hca.split(":")[0] for hca in ((fabrics.get("config") or {}).get(fabric) or {}).get("hca") or []]
        nics[fabric] = Nics(fabric=fabric, numa=tuple(device_numa.get(h) for h in hcas), rdma=fabric != "tcp",
                            names=tuple(hcas))
    return nics


def live_node_model(inventory: dict[str, Any]) -> NodeModel:
    """The node model of this node from its probed inventory (dlrun.probe.host.node_inventory)."""
    cpu = inventory.get("cpu") or {}
    sockets, cores = _count(cpu.get("sockets"), 1), _count(cpu.get("physical_cores"), 1)
    logical = _count(cpu.get("logical_cpus"), cores)
    gpus = (inventory.get("gpu") or {}).get("gpus") or []
    host = inventory.get("hostname") or "this node"
    return NodeModel(system=host, sockets=sockets, cores_per_socket=max(cores // sockets, 1),
                     threads_per_core=max(logical // cores, 1), numa_nodes=max(len(cpu.get("numa") or []), 1),
                     cpu_model=cpu.get("model"), gpu_model=gpus[0].get("name") if gpus else None,
                     gpu_numa=tuple(g.get("numa_node") for g in gpus),
                     compute_capability=next((g.get("compute_cap") for g in gpus if g.get("compute_cap")), None),
                     driver=next((g.get("driver") for g in gpus if g.get("driver")), None),
                     nics=_live_nics(inventory.get("fabrics") or {}), origin=f"this node ({host})")
