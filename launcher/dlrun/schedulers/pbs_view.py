"""PBS's view of a cluster for `dlrun systems init`: `pbsnodes -a -F json` (PBS Professional and OpenPBS since
18), else the text of `pbsnodes -a` (every PBS and Torque): each node's CPUs, memory, GPUs and queues.

Text records start with the node's name on a line of its own, then `key = value` lines, indented. PBS Professional
states `resources_available.ncpus`, `.mem` (with its unit: `384000000kb`), `.ngpus`; Torque states `np` and
`gpus`. A node's queues are its `queue` attribute, or the site's `resources_available.Qlist` (the custom resource
sites define to tie nodes to queues; spelt `qlist` at some: marbl/canu#166), comma separated. `resources_available.arch` is PBS's OS word (`linux`),
not the machine's. PBS names no default queue here (`qstat -B`), so the view lists no partition facts."""
from __future__ import annotations

import json
import re
from typing import Any

from dlrun.schedulers.base import ClusterView, NodeFacts, SchedulerError, installed_tool

#: The attributes of pbsnodes that the draft names as each value's source.
LABELS = {"cpus": "resources_available.ncpus", "memory": "resources_available.mem", "gpus": "resources_available.ngpus"}
_MIB = {"b": 1 / 1024 ** 2, "kb": 1 / 1024, "mb": 1, "gb": 1024, "tb": 1024 * 1024}


def _mib(value: Any) -> int | None:
    match = re.fullmatch(r"(\d+)([kmgt]?b)?", str(value or "").strip().lower())
    return round(int(match.group(1)) * _MIB[match.group(2) or "b"]) if match else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) or str(value or "").strip().isdigit() else None


def _node(name: str, attrs: dict[str, Any], available: dict[str, Any]) -> NodeFacts:
    available = {str(key).lower(): value for key, value in available.items()}  # PBS's resource names ignore case
    queues = str(attrs.get("queue") or available.get("qlist") or "")
    gpus = _int(available.get("ngpus")) or _int(attrs.get("gpus")) or 0
    return NodeFacts(name=name, cpus=_int(available.get("ncpus")) or _int(attrs.get("np")) or _int(attrs.get("pcpus")),
                     memory_mib=_mib(available.get("mem")), gpus=gpus, hostname=str(attrs.get("Mom") or "") or None,
                     partitions=tuple(q.strip() for q in queues.split(",") if q.strip()))


def parse_pbsnodes(text: str) -> list[NodeFacts]:
    """The node records of `pbsnodes -a` text."""
    records: list[tuple[str, dict[str, str]]] = []
    for line in text.replace("\r\n", "\n").splitlines():
        if line.strip() and not line[0].isspace():
            records.append((line.strip(), {}))
        elif " = " in line and records:
            key, _, value = line.strip().partition(" = ")
            records[-1][1][key] = value.strip()
    out = []
    for name, attrs in records:
        available = {key.split(".", 1)[1]: value for key, value in attrs.items()
                     if key.startswith("resources_available.")}
        out.append(_node(name, attrs, available))
    return out


def parse_pbsnodes_json(text: str) -> list[NodeFacts]:
    """The nodes of `pbsnodes -a -F json`."""
    try:
        nodes = json.loads(text).get("nodes") or {}
    except (ValueError, AttributeError):
        raise SchedulerError("pbsnodes -F json printed no JSON object with `nodes`") from None
    return [_node(name, attrs, attrs.get("resources_available") or {}) for name, attrs in nodes.items()
            if isinstance(attrs, dict)]


def cluster_view() -> ClusterView | None:
    """This cluster as `pbsnodes` describes it; None without PBS's client tools."""
    proc = installed_tool(["pbsnodes", "-a", "-F", "json"])
    if proc is None:
        return None
    if proc.returncode == 0 and proc.stdout.lstrip().startswith("{"):
        return ClusterView("pbsnodes -a -F json", tuple(parse_pbsnodes_json(proc.stdout)), (), labels=LABELS)
    text = installed_tool(["pbsnodes", "-a"])  # Torque and PBS before 18 know no -F
    if text is None or text.returncode != 0:
        said = (text.stderr or text.stdout).strip()[:300] if text is not None else ""
        raise SchedulerError(f"pbsnodes -a failed: {said}")
    return ClusterView("pbsnodes -a", tuple(parse_pbsnodes(text.stdout)), (), labels=LABELS)
