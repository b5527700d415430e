"""Slurm's view of a cluster for `dlrun systems init`: `scontrol show node` (every node's CPUs, sockets, cores,
threads, memory, GRES GPUs, features, architecture and partitions) and `sinfo` (the partitions, which is the
default, their state and time limit), read from the text the commands print.

`scontrol show node` prints one record per node, `NodeName=...` first, as KEY=VALUE words over several lines
(or one line with --oneliner); a value may hold spaces (`OS=Linux 5.14 #1 SMP ...`) and `=` (`CfgTRES=cpu=64,...`).
`sinfo`'s default table has one line per partition and node state: PARTITION (the default one marked `*`),
AVAIL, TIMELIMIT, NODES, STATE, NODELIST."""
from __future__ import annotations

import re

from dlrun.schedulers.base import ClusterView, NodeFacts, PartitionFacts, tool_output

_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z_][A-Za-z0-9_]*)=")
#: One GRES entry: name, optional type, count, optional socket binding: gpu:a100:4(S:0-1)
_GRES = re.compile(r"^(?P<name>[^:()]+)(?::(?P<type>[^:()]+))?:(?P<count>\d+)(?:\(.*\))?$")
_EMPTY = {"", "(null)", "N/A", "n/a", "None"}


def _fields(record: str) -> dict[str, str]:
    """KEY=VALUE words of one record; a value runs to the next KEY= that starts a word."""
    keys = list(_KEY.finditer(record))
    out = {}
    for match, following in zip(keys, keys[1:] + [None]):
        end = following.start() if following else len(record)
        out.setdefault(match.group(1), record[match.end():end].strip())
    return out


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def gres_gpus(gres: str | None) -> tuple[int, str | None]:
    """(GPUs per node, their GRES type or None) from a node's Gres: `gpu:tesla:4(S:0-1)`, `gpu:2`,
    `gpu_mem:16280,gpu:1`, `(null)`."""
    if gres is None or gres in _EMPTY:
        return 0, None
    count, types = 0, []
    for item in re.split(r",(?![^(]*\))", gres):
        match = _GRES.match(item.strip())
        if match and match.group("name") == "gpu":
            count += int(match.group("count"))
            if match.group("type"):
                types.append(match.group("type"))
    return count, ("/".join(dict.fromkeys(types)) or None)


def parse_nodes(text: str) -> list[NodeFacts]:
    """Every node record of `scontrol show node` output (several lines or one per node)."""
    text = text.replace("\r\n", "\n")
    records = re.split(r"\n\s*(?=NodeName=)|\n\s*\n", text.strip())
    nodes = []
    for record in records:
        fields = _fields(" ".join(line.strip() for line in record.splitlines()))
        if "NodeName" not in fields:
            continue
        gpus, gpu_type = gres_gpus(fields.get("Gres"))
        features = fields.get("AvailableFeatures", "")
        nodes.append(NodeFacts(
            name=fields["NodeName"], cpus=_int(fields.get("CPUTot")), sockets=_int(fields.get("Sockets")),
            cores_per_socket=_int(fields.get("CoresPerSocket")), threads_per_core=_int(fields.get("ThreadsPerCore")),
            memory_mib=_int(fields.get("RealMemory")), gpus=gpus, gpu_type=gpu_type,
            features=tuple(f for f in features.split(",") if f and features not in _EMPTY),
            arch=None if fields.get("Arch") in (None, *_EMPTY) else fields["Arch"],
            hostname=fields.get("NodeHostName") or None,
            partitions=tuple(p for p in fields.get("Partitions", "").split(",") if p)))
    return nodes


def parse_sinfo(text: str) -> list[PartitionFacts]:
    """The partitions of `sinfo`'s default table, in order, each with its node count summed over states."""
    found: dict[str, PartitionFacts] = {}
    for line in text.replace("\r\n", "\n").splitlines():
        words = line.split()
        if len(words) < 5 or words[0] == "PARTITION" or not words[3].isdigit():
            continue
        name = words[0].rstrip("*")
        before = found.get(name)
        count = int(words[3]) + (before.nodes or 0 if before else 0)
        found[name] = PartitionFacts(name, default=words[0].endswith("*"), available=words[1],
                                     time_limit=words[2], nodes=count)
    return list(found.values())


def cluster_view() -> ClusterView | None:
    """This cluster as its Slurm controller describes it; None without Slurm's client tools."""
    nodes_text = tool_output(["scontrol", "show", "node"])
    if nodes_text is None:
        return None
    partitions_text = tool_output(["sinfo", "--format=%P %a %l %D %t %N"]) or ""
    version = re.search(r"slurm[- ]([\d.]+)", tool_output(["sinfo", "--version"]) or "")
    return ClusterView("scontrol show node, sinfo", tuple(parse_nodes(nodes_text)),
                       tuple(parse_sinfo(partitions_text)), version.group(1) if version else None)
