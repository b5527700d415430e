"""The entries of a drafted system profile, each with its source: from the scheduler's view of a partition
where there is one, else from this node alone."""
from __future__ import annotations

from typing import Any

from dlrun.registry import SCHEDULERS
from dlrun.schedulers.base import ClusterView, NodeFacts, PartitionFacts

from dlrun.systeminit import NOT_KNOWN, NULL, Entry, Probed, choose_partition, partition_nodes


def gpu_type_source(view: ClusterView, said: str) -> str:
    """Where a node's GPU type comes from: Slurm's GRES type, a PBS site's own resource (`gputype`), or the GPU's
    name itself (Torque's `gpu_status`: `gpu_product_name`)."""
    if "gpu_name" in view.labels:
        return f"{said}: {view.labels['gpu_name']}"
    if "gpu_type" in view.labels:
        return f"{said}: {view.labels['gpu_type']}; {NOT_KNOWN} to the GPU's name"
    return f"{said}: {view.label('gpus')}: the GRES type; {NOT_KNOWN} to the GPU's name"


def _gpu_entries(probed: Probed, count: int, gres_type: str | None, from_scheduler: str | None,
                 on_node: bool, type_source: str | None = None) -> list[Entry]:
    """gpus.*: the count from the scheduler (or nvidia-smi), model and memory from nvidia-smi where this
    node has the same GPUs, else the scheduler's GPU type as the model."""
    local = probed.facts.gpus
    if not count:
        return []
    probed_here = f"probed on {probed.host} (nvidia-smi)"
    out = [Entry("gpus.count_per_node", count, from_scheduler or probed_here)]
    if local and (on_node or from_scheduler is None):
        memory = local[0].get("memory_mib")
        out.append(Entry("gpus.model", local[0]["name"], probed_here))
        out.append(Entry("gpus.memory_gb", round(float(memory) / 1024, 1) if memory else None,
                         probed_here if memory else NOT_KNOWN))
        capability = local[0].get("compute_cap")
        out.append(Entry("gpus.compute_capability", capability, probed_here if capability else NOT_KNOWN))
    else:
        out.append(Entry("gpus.model", gres_type or "gpu",
                         (type_source or f"{from_scheduler}: the GRES type; {NOT_KNOWN} to the GPU's name")
                         if gres_type else f"{NOT_KNOWN}: the GPU's name (the scheduler names no GPU type)"))
        out.append(Entry("gpus.memory_gb", None, NOT_KNOWN))
    out.append(Entry("gpus.interconnect", None, f"{NOT_KNOWN} (NVLink, PCIe)"))
    return out


def _fabric_entries(probed: Probed, on_node: bool) -> list[Entry]:
    fabrics = probed.facts.fabrics
    config = fabrics.get("config", {})
    where = f"probed on {probed.host} (/sys/class/infiniband, /sys/class/net)" + (
        "" if on_node else f"; {probed.host} is not a node of the partition: check its nodes have the same")
    out = [Entry("fabrics", list(config) or ["tcp"], where)]
    if config:
        out.append(Entry("fabric_config", config, where))
    return out


def from_node(name: str, probed: Probed, scheduler: str) -> list[Entry]:
    """A one-node system: this node as the probes see it."""
    cpu = probed.cpu
    here = f"probed on {probed.host}"
    sockets = cpu.get("sockets") or 1
    physical = cpu.get("physical_cores") or probed.facts.usable_cpus
    logical = cpu.get("logical_cpus") or physical
    return [
        Entry("name", name, "the name given"),
        Entry("description", f"{probed.host}: {physical} cores" + (f", {len(probed.facts.gpus)} GPUs"
                                                                      if probed.facts.gpus else ", no GPU"),
              f"{here}; say what it is"),
        Entry("arch", probed.facts.arch, f"{here} (uname -m)"),
        Entry("nodes", 1, f"this node alone: no scheduler's view of nodes here ({scheduler})"),
        Entry("cpu.model", probed.facts.cpu_model, f"{here} (/proc/cpuinfo)" if probed.facts.cpu_model else NOT_KNOWN),
        Entry("cpu.sockets", sockets, f"{here} (/sys/devices/system/cpu)"),
        Entry("cpu.cores_per_socket", max(physical // sockets, 1), f"{here} (/sys/devices/system/cpu)"),
        Entry("cpu.threads_per_core", max(logical // max(physical, 1), 1), f"{here} (/sys/devices/system/cpu)"),
        Entry("cpu.numa_nodes", probed.facts.numa_nodes, f"{here} (/sys/devices/system/node)"),
        Entry("memory_gb", probed.facts.memory_gb, f"{here} (/proc/meminfo, GiB)"),
        *_gpu_entries(probed, len(probed.facts.gpus), None, None, True),
        *_fabric_entries(probed, True),
        Entry("scheduler", scheduler, "no scheduler's tools answered here"),
    ]


def cpu_entries(at: tuple[str, ...], view: ClusterView, node: NodeFacts, said: str) -> list[Entry]:
    """cpu.sockets, cores_per_socket, threads_per_core as the scheduler states them; where it states only the CPU
    count (LSF's ncpus, PBS's ncpus), that count as one socket's cores, marked for the site to set."""
    out = [Entry((*at, key), value, f"{said}: {view.label(key)}" if value else NOT_KNOWN)
           for key, value in (("sockets", node.sockets), ("cores_per_socket", node.cores_per_socket),
                              ("threads_per_core", node.threads_per_core))]
    if node.cores_per_socket is None and node.cpus:
        out[1] = Entry((*at, "cores_per_socket"), node.cpus, f"{said}: {view.label('cpus')}, taken as one socket's "
                       f"cores ({NOT_KNOWN}: sockets, cores per socket and threads per core)")
    return out


def _on_node(probed: Probed, nodes: list[NodeFacts]) -> bool:
    return any(probed.host in (node.name, (node.hostname or "").split(".")[0]) for node in nodes)


def _node_entries(probed: Probed, view: ClusterView, node: NodeFacts, said: str, on_node: bool) -> list[Entry]:
    here = f"probed on {probed.host}" + ("" if on_node else f" (not a node of the partition: check its nodes)")
    model = probed.facts.cpu_model
    out = [Entry("arch", node.arch or probed.facts.arch,
                 f"{said}: {view.label('arch')}" if node.arch else f"{here} (uname -m)"),
           Entry("cpu.model", model, f"{here} (/proc/cpuinfo)" if model else NOT_KNOWN)]
    out += cpu_entries(("cpu",), view, node, said)
    numa = probed.facts.numa_nodes if on_node else None
    out.append(Entry("cpu.numa_nodes", numa, f"{here} (/sys/devices/system/node)" if numa else NOT_KNOWN))
    memory = round(node.memory_mib / 1024, 1) if node.memory_mib else None
    out.append(Entry("memory_gb", memory, f"{said}: {view.label('memory')} {node.memory_mib} MiB / 1024" if memory
                     else NOT_KNOWN))
    return out


def _facts(view: ClusterView, name: str | None) -> PartitionFacts | None:
    return next((p for p in view.partitions if p.name == name), None)


def _described(count: int, group: str, node: NodeFacts, facts: PartitionFacts | None) -> str:
    """A description of `count` nodes like `node`, with what the scheduler says of their partition."""
    text = f"{count} node(s) of {group}: {node.cpus} CPUs" + (
        f", {node.gpus} GPUs ({node.gpu_type or 'gpu'})" if node.gpus else ", no GPU")
    return text + (f" ({facts.description})" if facts and facts.description else "")


def _selected(view: ClusterView, name: str | None) -> str:
    """How a job of this scheduler selects partition `name` (`bsub -q NAME`), where the view says."""
    select = view.labels.get("select")
    return f"; a job selects it with `{select} {name}`" if select and name else ""


def _facts_said(facts: PartitionFacts | None) -> tuple[str, str]:
    """What a partition's own facts add to the sources of the description (its description and limits) and of
    the node count (what of its hosts no tool here resolved)."""
    if facts is None:
        return "", ""
    about = f"; {facts.source}: the queue's description" if facts.description else ""
    if facts.limits:
        about += f"; its limits ({facts.source}): " + ", ".join(f"{word} {value}" for word, value in facts.limits)
    return about, "".join(f"; {note}" for note in facts.notes)


def _longest(facts: PartitionFacts | None) -> str:
    return f"the partition's longest job: {facts.time_limit} ({facts.source})" if facts and facts.time_limit else ""


def from_view(name: str, probed: Probed, view: ClusterView, scheduler: str, launchers: tuple[str, ...],
              partition: str | None) -> list[Entry]:
    """One partition's nodes (its most common configuration; every node where the view names no partition) as
    the scheduler describes them, and the other partitions it shows nodes of."""
    chosen = choose_partition(view, partition)
    nodes, configurations = partition_nodes(view, chosen)
    node, facts = nodes[0], _facts(view, chosen)
    said = f"{view.source.split(',')[0]} ({node.name})"
    on_node = _on_node(probed, nodes)
    group = f"partition {chosen}" if chosen else "the cluster"
    others = "" if len(configurations) == 1 else \
        f"; {sum(n for _, n in configurations[1:])} other node(s) of {group} differ and are left out"
    about, of_nodes = _facts_said(facts)
    entries = [
        Entry("name", name, "the name given"),
        Entry("description", _described(len(nodes), group, node, facts), f"{view.source}; say what it is{about}"),
        Entry("nodes", len(nodes), f"{view.source}: the nodes of {group} like {node.name}{others}{of_nodes}"),
        *_node_entries(probed, view, node, said, on_node),
        *_gpu_entries(probed, node.gpus, node.gpu_type, f"{said}: {view.label('gpus')}", on_node,
                      gpu_type_source(view, said)),
        *_fabric_entries(probed, on_node),
        Entry("scheduler", scheduler, f"{view.source} answered" + (f" (Slurm {view.version})" if view.version else "")),
    ]
    if launchers:
        entries.append(Entry("launcher", launchers[0], f"the launcher of scheduler {scheduler}"))
    return entries + _scheduler_entries(view, chosen, node, said, scheduler) + partition_entries(view, chosen, node)


def _scheduler_entries(view: ClusterView, chosen: str | None, node: NodeFacts, said: str,
                       scheduler: str) -> list[Entry]:
    facts = _facts(view, chosen)
    limit = f"; {_longest(facts)}" if _longest(facts) else ""
    default = " (the default)" if facts and facts.default else ""
    listed = f"; its {len(view.partitions)} queue(s) are under `partitions`" if view.partitions else ""
    entries = [Entry("scheduler_options.partition", chosen,
                     f"{view.source}{default}{_selected(view, chosen)}" if chosen else
                     f"{NOT_KNOWN}: the queue jobs go to, if not the scheduler's default ({view.source} names none"
                     f"{listed})"),
               Entry("scheduler_options.time", "00:30:00", f"dlrun's default job time{limit}"),
               Entry("scheduler_options.account", None, NOT_KNOWN)]
    if node.features and "constraint" in SCHEDULERS.get_class(scheduler).options.model_fields:
        entries.append(Entry("scheduler_options.constraint", None,
                             f"{NOT_KNOWN}, if the jobs need one of the features {', '.join(node.features)} "
                             f"({said}: {view.label('features')})"))
    return entries


def _partition_names(view: ClusterView) -> list[str]:
    listed = [p.name for p in view.partitions]
    return listed + sorted({p for n in view.nodes for p in n.partitions} - set(listed))


def _one_partition(view: ClusterView, name: str, system_node: NodeFacts) -> list[Entry]:
    """partitions.NAME: its nodes (its most common configuration) where they differ from the system's."""
    nodes, configurations = partition_nodes(view, name)
    node, facts = nodes[0], _facts(view, name)
    said = f"{view.source.split(',')[0]} ({node.name})"
    others = "" if len(configurations) == 1 else \
        f"; {sum(n for _, n in configurations[1:])} other node(s) of the partition differ and are left out"
    about, of_nodes = _facts_said(facts)
    at = ("partitions", name)
    out = [Entry((*at, "description"), _described(len(nodes), f"partition {name}", node, facts),
                 f"{view.source}; say what it is{about}"),
           Entry((*at, "nodes"), len(nodes),
                 f"{view.source}: the nodes of partition {name} like {node.name}{others}{_selected(view, name)}"
                 f"{of_nodes}")]
    if node.arch and node.arch != system_node.arch:
        out.append(Entry((*at, "arch"), node.arch, f"{said}: {view.label('arch')}"))
    cpu = (node.sockets, node.cores_per_socket, node.threads_per_core, node.cpus)
    if cpu != (system_node.sockets, system_node.cores_per_socket, system_node.threads_per_core, system_node.cpus):
        out += cpu_entries((*at, "cpu"), view, node, said)
        out.append(Entry((*at, "cpu", "numa_nodes"), None, f"{NOT_KNOWN} (no scheduler's view says)"))
    if node.memory_mib and node.memory_mib != system_node.memory_mib:
        out.append(Entry((*at, "memory_gb"), round(node.memory_mib / 1024, 1),
                         f"{said}: {view.label('memory')} {node.memory_mib} MiB / 1024"))
    if (node.gpus, node.gpu_type) != (system_node.gpus, system_node.gpu_type):
        out += _partition_gpus(at, node, f"{said}: {view.label('gpus')}", gpu_type_source(view, said))
    if _longest(facts):
        out.append(Entry((*at, "scheduler_options", "time"), None,
                         f"{NOT_KNOWN} if not the system's; {_longest(facts)}"))
    return out


def _partition_gpus(at: tuple[str, ...], node: NodeFacts, said: str, type_source: str) -> list[Entry]:
    if not node.gpus:
        return [Entry((*at, "gpus"), NULL, f"{said}: none")]
    return [Entry((*at, "gpus", "count_per_node"), node.gpus, said),
            Entry((*at, "gpus", "model"), node.gpu_type or "gpu",
                  type_source if node.gpu_type else f"{NOT_KNOWN}: the GPU's name"),
            Entry((*at, "gpus", "memory_gb"), None, NOT_KNOWN)]


def partition_entries(view: ClusterView, chosen: str | None, system_node: NodeFacts) -> list[Entry]:
    """Every other partition the scheduler shows nodes of, as `partitions` entries; those without a node shown
    are named in a comment (one each where the scheduler named nodes that no tool here resolved, saying which)."""
    out: list[Entry] = []
    unresolved: list[Entry] = []
    empty = []
    for name in _partition_names(view):
        if name == chosen:
            continue
        if any(name in node.partitions for node in view.nodes):
            out += _one_partition(view, name, system_node)
        elif (facts := _facts(view, name)) and facts.notes:
            unresolved.append(Entry(("partitions", name), None, f"not listed: {'; '.join(facts.notes)}"))
        else:
            empty.append(name)
    out += unresolved
    if empty:
        out.append(Entry("partitions", None, f"not listed: {', '.join(empty)} ({view.source.split(',')[0]} showed none "
                         "of their nodes)"))
    return out


def common_tail(scheduler_runtimes: list[str]) -> list[Entry]:
    """What no probe can tell: how the site runs its images."""
    return [Entry("runtime", None, f"{NOT_KNOWN}: how ranks start their image ({', '.join(scheduler_runtimes)}); "
                  "without it, on the host"),
            Entry("default_image", None, f"{NOT_KNOWN}: the image runs use when --image names none"),
            Entry("hostnames", None, f"{NOT_KNOWN}: regular expressions of the login and compute nodes' names, so "
                  "that a run there picks this system"),
            Entry("mpi", None, f"{NOT_KNOWN}: the site's host MPI, e.g. \"openmpi 4.1.5\"")]


def value_of(entries: list[Entry], path: str) -> Any:
    return next((e.value for e in entries if e.path == path), None)
