"""Where each rank's threads run: the NUMA node every local rank is bound to, and how many threads fit.

dlrun binds a GPU rank to its GPU's NUMA node (the affinity wrapper in front of each rank,
dlrun.launchers.base); where the profile does not know the GPU's NUMA node but knows the NIC's, to the NIC's
(said in the job). Ranks that share one NUMA node share its cores, so a rank gets the node's cores divided
by the ranks bound to it, never the node's whole count (two TX-GAIA ranks on socket 1: 10 threads each, not
20). Without any binding the ranks share the whole node.
"""
from __future__ import annotations

from dataclasses import dataclass

from dlrun.nodemodel.node import NodeModel


@dataclass(frozen=True)
class AffinityMap:
    """The NUMA node of each GPU index as the affinity wrapper reads it, and why."""

    numa: tuple[int, ...]
    by: str  #: "gpu": each GPU's own NUMA node; "nic": the fabric's NIC's (the GPUs' are not known)


def affinity_map(node: NodeModel, fabric: str) -> AffinityMap | None:
    """The GPU -> NUMA node map ranks are bound by: the GPUs' own where the profile has them, else the NIC's of
    an RDMA fabric whose NICs all sit on one known NUMA node; None when neither is known."""
    if node.gpu_numa_known():
        return AffinityMap(numa=tuple(int(n) for n in node.gpu_numa), by="gpu")  # type: ignore[arg-type]
    nics = node.nics.get(fabric)
    if node.gpus and nics is not None and nics.rdma and nics.numa and None not in nics.numa \
            and len(set(nics.numa)) == 1:
        return AffinityMap(numa=(int(nics.numa[0]),) * node.gpus, by="nic")  # type: ignore[arg-type]
    return None


def ranks_per_numa(numa: tuple[int, ...], ranks: int) -> dict[int, int]:
    """{NUMA node: local ranks bound to it} for local ranks 0..ranks-1 taking GPUs 0..ranks-1."""
    counts: dict[int, int] = {}
    for local in range(ranks):
        node = numa[local % len(numa)]
        counts[node] = counts.get(node, 0) + 1
    return counts


def threads_per_rank(node: NodeModel, ranks: int, numa: tuple[int, ...] | None) -> int:
    """The most threads each rank can run without two threads on one core: the cores of the set a rank is
    bound to over the ranks bound to that set (the smallest share where sets differ)."""
    if not numa:
        return max(node.cores // max(ranks, 1), 1)
    shares = [node.cores_of_numa(n) // count for n, count in ranks_per_numa(numa, ranks).items()]
    return max(min(shares), 1)


def rank_affinity(node: NodeModel, fabric: str, device: str, dist: str | None) -> AffinityMap | None:
    """The map a plan's ranks are bound by: GPU ranks only, and not a --dist dataparallel process (it drives
    GPUs on every socket, so no one socket is its GPU's)."""
    if device != "cuda" or dist == "dataparallel":
        return None
    return affinity_map(node, fabric)
