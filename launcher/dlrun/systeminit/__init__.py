"""`dlrun systems init`: a system profile for this site, drafted from what can be seen from here: this node (the
probes `dlrun doctor` uses: CPUs, memory, GPUs through nvidia-smi, fabrics from sysfs) and the scheduler's
view of its nodes and partitions (`Scheduler.cluster_view`: Slurm's `scontrol show node` and `sinfo`).

Every value is an `Entry` with its source: `scontrol show node (...)`, `sinfo`, `probed on HOST`, dlrun's
default, or `not known: set it` (written as a commented-out line for the site to fill in). The text is YAML
with each source as a comment beside its value, and a `sources` list naming what was asked where; it is
validated by the same loader and schema as every catalog entry (dlrun.catalog.loader) before it is written.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from dlrun.errors import UsageError, unknown_name
from dlrun.probe.host import HostFacts
from dlrun.schedulers.base import ClusterView, NodeFacts

NOT_KNOWN = "not known: set it"


class _Null:
    """A value stated as none (a CPU partition's `gpus: null`), unlike None: a value not known."""

    def __repr__(self) -> str:
        return "NULL"


NULL = _Null()


@dataclass(frozen=True)
class Entry:
    """One value of the profile: where it goes (`cpu.sockets`, or a tuple of keys where one may hold a dot: a
    partition's name), the value (None: not known; NULL: none) and its source."""

    path: str | tuple[str, ...]
    value: Any
    source: str


@dataclass(frozen=True)
class Probed:
    """This node, as the probes see it."""

    facts: HostFacts
    cpu: dict[str, Any]          # dlrun.probe.cpu.cpu_inventory()

    @property
    def host(self) -> str:
        return self.facts.hostname.split(".")[0]


def _configuration(node: NodeFacts) -> tuple:
    return (node.cpus, node.sockets, node.cores_per_socket, node.threads_per_core, node.memory_mib, node.gpus,
            node.gpu_type, node.arch)


def choose_partition(view: ClusterView, partition: str | None) -> str | None:
    """The partition asked for, else the default one (else the only one); None where the view names no partition
    at all, or where its scheduler's tools do not say which is the default (LSF's `bqueues -l`): its nodes are
    then the cluster's, and every partition an entry of `partitions`."""
    names = [p.name for p in view.partitions] or sorted({p for n in view.nodes for p in n.partitions})
    if not names:
        if partition is not None:
            raise UsageError(f"--partition {partition}: `{view.source}` names no partition (queue) of a node; valid: "
                             "leave it out")
        return None
    if partition is not None:
        if partition not in names:
            raise unknown_name("partition", partition, names)
        return partition
    default = [p.name for p in view.partitions if p.default]
    if default:
        return default[0]
    if len(names) == 1:
        return names[0]
    if any(p.default is None for p in view.partitions):
        return None
    raise UsageError(f"no default partition: name one with --partition; valid: {', '.join(names) or 'none'}")


def partition_nodes(view: ClusterView, partition: str | None) -> tuple[list[NodeFacts], list[tuple[tuple, int]]]:
    """The partition's nodes (None: every node) of its most common configuration, and every configuration with its
    node count."""
    members = [node for node in view.nodes if partition is None or partition in node.partitions]
    if not members and partition is None:
        raise UsageError(f"`{view.source}` shows no host that takes batch jobs; valid: run on a login node of a "
                         "cluster whose scheduler has compute hosts")
    if not members:
        raise UsageError(f"partition {partition!r} has no node in `{view.source}`; valid: a partition with nodes: "
                         + ", ".join(sorted({p for n in view.nodes for p in n.partitions})))
    counts = Counter(_configuration(node) for node in members).most_common()
    common = counts[0][0]
    return [node for node in members if _configuration(node) == common], counts
