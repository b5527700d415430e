"""PBS's view of a cluster for `dlrun systems init`: `pbsnodes -a -F json` (PBS Professional and OpenPBS since
18), else the text of `pbsnodes -a` (every PBS and Torque): each node's CPUs, memory, GPUs and queues; and, where
they answer, `qstat -Qf` (the queues: each one's state, longest job, limits and the nodes it is tied to) and
`qstat -Bf` (the server's `default_queue`).

Text records start with the node's name on a line of its own, then `key = value` lines, indented. PBS Professional
states `resources_available.ncpus`, `.mem` (with its unit: `384000000kb`), `.ngpus` (and a site may define its
own GPU type resource: `resources_available.gputype = A100` on ALCF's Polaris); Torque states `np`, `gpus`,
`properties` (comma separated), its memory only in `status` (`physmem=395990144kb`) and each GPU's name in
`gpu_status` (`gpu_product_name=Tesla P100-PCIE-16GB`). A node's queues are its `queue` attribute, or the site's
`resources_available.Qlist` (the custom resource sites define to tie nodes to queues; spelt `qlist` at some:
marbl/canu#166), comma separated. `resources_available.arch` is PBS's OS word (`linux`), not the machine's.

`qstat -Qf` prints `Queue: NAME` records of `key = value` lines (a long value wraps onto lines that start with a
tab). An execution queue's nodes are those it is tied to: whose `queue` (or Qlist) names it, whose Qlist holds
its `default_chunk.Qlist`, or (Torque) whose `properties` hold its `resources_default.neednodes`; a queue tied to
none runs on the nodes no queue holds, and says so. A route queue has no nodes of its own and is left out. Where
`qstat` does not answer, a node's queues are what its own attributes say.

Every command's output is data: read up to a size budget, never run, names kept only where they are words a
directive may hold, text shown only as plain single lines."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any

from dlrun.catalog.models import DIRECTIVE_WORD
from dlrun.schedulers.base import ClusterView, NodeFacts, PartitionFacts, SchedulerError, installed_tool
from dlrun.text import plain

#: The attributes of pbsnodes that the draft names as each value's source (PBS Professional's; Torque's below).
LABELS = {"cpus": "resources_available.ncpus", "memory": "resources_available.mem", "gpus": "resources_available.ngpus",
          "select": "qsub -q"}
TORQUE_LABELS = {"cpus": "np", "memory": "status physmem", "gpus": "gpus", "gpu_name": "gpu_status gpu_product_name",
                 "features": "properties", "select": "qsub -q"}
_MIB = {"b": 1 / 1024 ** 2, "kb": 1 / 1024, "mb": 1, "gb": 1024, "tb": 1024 * 1024}
#: What is read of one command's output (a 2008 PBS Professional site's 113 nodes print 53 KiB).
MAX_OUTPUT_CHARS = 32 << 20
MAX_TEXT = 200
_NAME = re.compile(DIRECTIVE_WORD)
#: Queue attributes kept as its limits (besides resources_max.walltime, its longest job).
_LIMITS = re.compile(r"(resources_(max|min)\.\w+|max_run|max_user_run|max_queued|max_queuable)")


def bounded(text: str) -> str:
    """A command's output within the size budget (the rest is not read)."""
    return text[:MAX_OUTPUT_CHARS]


def _line(value: Any) -> str:
    """Outside text as one plain line (no control or bidi characters, no line breaks), within MAX_TEXT."""
    return " ".join(plain(str(value), newlines=False).split())[:MAX_TEXT]


def _mib(value: Any) -> int | None:
    match = re.fullmatch(r"(\d+)([kmgt]?b)?", str(value or "").strip().lower())
    return round(int(match.group(1)) * _MIB[match.group(2) or "b"]) if match else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) or str(value or "").strip().isdigit() else None


def _words(value: Any) -> tuple[str, ...]:
    """A comma-separated list attribute's words that a directive may hold."""
    return tuple(word for word in (part.strip() for part in str(value or "").split(",")) if _NAME.match(word))


def _torque_status(attrs: dict[str, Any]) -> tuple[int | None, str | None]:
    """(memory in MiB, the first GPU's name) of a Torque node's `status` and `gpu_status`."""
    physmem = re.search(r"(?:^|,)physmem=(\d+[kmgt]?b)", str(attrs.get("status") or ""))
    product = re.search(r"gpu_product_name=([^;,]+)", plain(str(attrs.get("gpu_status") or ""), newlines=False))
    return (_mib(physmem.group(1)) if physmem else None), (_line(product.group(1)) if product else None)


def _node(name: str, attrs: dict[str, Any], available: dict[str, Any]) -> NodeFacts:
    available = {str(key).lower(): value for key, value in available.items()}  # PBS's resource names ignore case
    queues = attrs.get("queue") or available.get("qlist")
    gpus = _int(available.get("ngpus")) or _int(attrs.get("gpus")) or 0
    physmem, product = _torque_status(attrs)
    gpu_type = _line(available["gputype"]) if available.get("gputype") else product
    return NodeFacts(name=_line(name), cpus=_int(available.get("ncpus")) or _int(attrs.get("np"))
                     or _int(attrs.get("pcpus")), memory_mib=_mib(available.get("mem")) or physmem, gpus=gpus,
                     gpu_type=gpu_type if gpus else None, hostname=_line(attrs.get("Mom") or "") or None,
                     features=_words(attrs.get("properties")), partitions=_words(queues))


def parse_pbsnodes(text: str) -> list[NodeFacts]:
    """The node records of `pbsnodes -a` text."""
    records: list[tuple[str, dict[str, str]]] = []
    for line in bounded(text).replace("\r\n", "\n").splitlines():
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


def labels_of(text: str) -> dict[str, str]:
    """The words the draft names as sources: Torque's where its nodes state `np` and no `resources_available`,
    PBS Professional's otherwise (with its site's GPU type resource where a node states one)."""
    if "resources_available." not in text and re.search(r"^\s+np = ", text, re.MULTILINE):
        return TORQUE_LABELS
    if re.search(r"resources_available\.gputype", text, re.IGNORECASE):
        return {**LABELS, "gpu_type": "resources_available.gputype"}
    return LABELS


def parse_pbsnodes_json(text: str) -> list[NodeFacts]:
    """The nodes of `pbsnodes -a -F json`."""
    try:
        nodes = json.loads(bounded(text)).get("nodes") or {}
    except (ValueError, AttributeError):
        raise SchedulerError("pbsnodes -F json printed no JSON object with `nodes`") from None
    return [_node(name, attrs, attrs.get("resources_available") or {}) for name, attrs in nodes.items()
            if isinstance(attrs, dict)]


# ------------------------------------------------------------------------------------------------ qstat -Qf
@dataclass(frozen=True)
class Queue:
    """One execution queue of `qstat -Qf`, with the attributes that tie it to nodes."""

    name: str
    enabled: bool | None = None
    started: bool | None = None
    walltime: str | None = None
    qlist: str | None = None       # default_chunk.Qlist (PBS Professional)
    neednodes: str | None = None   # resources_default.neednodes (Torque)
    limits: tuple[tuple[str, str], ...] = ()


def _records(text: str, first: str) -> list[tuple[str, dict[str, str]]]:
    """`first NAME` records of `key = value` lines; a line that starts with a tab continues the value above."""
    records: list[tuple[str, dict[str, str]]] = []
    last = None
    for line in bounded(text).replace("\r\n", "\n").splitlines():
        if line.startswith(first):
            records.append((line[len(first):].strip(), {}))
            last = None
        elif line.startswith("\t") and records and last:
            records[-1][1][last] += line.strip()
        elif " = " in line and records:
            last, _, value = line.strip().partition(" = ")
            records[-1][1][last] = value.strip()
    return records


def _flag(value: str | None) -> bool | None:
    return None if value is None else value.strip().lower() in ("true", "t", "1", "y")


def parse_qstat_queues(text: str) -> list[Queue]:
    """The execution queues of `qstat -Qf` (route queues and names no directive may hold are left out)."""
    out = []
    for name, attrs in _records(text, "Queue:"):
        if attrs.get("queue_type", "").lower().startswith("r") or not _NAME.match(name):
            continue
        limits = tuple((key, _line(value)) for key, value in attrs.items()
                       if _LIMITS.fullmatch(key) and key != "resources_max.walltime")
        out.append(Queue(name, _flag(attrs.get("enabled")), _flag(attrs.get("started")),
                         _line(attrs["resources_max.walltime"]) if "resources_max.walltime" in attrs else None,
                         (_words(attrs.get("default_chunk.Qlist")) or (None,))[0],
                         (_words(attrs.get("resources_default.neednodes")) or (None,))[0], limits))
    return out


def default_queue(text: str) -> str | None:
    """The server's `default_queue` of `qstat -Bf`."""
    for _, attrs in _records(text, "Server:"):
        words = _words(attrs.get("default_queue"))
        if words:
            return words[0]
    return None


def _state(queue: Queue) -> str | None:
    if queue.enabled is None and queue.started is None:
        return None
    return f"enabled={queue.enabled}, started={queue.started}"


def _members(queue: Queue, nodes: list[NodeFacts]) -> tuple[list[NodeFacts], tuple[str, ...]]:
    """The nodes tied to `queue`, and how they were found where that is not the queue's own name on them."""
    tied = [node for node in nodes if queue.name in node.partitions
            or (queue.qlist is not None and queue.qlist in node.partitions)
            or (queue.neednodes is not None and queue.neednodes in node.features)]
    if tied or queue.qlist or queue.neednodes:
        return tied, ()
    free = [node for node in nodes if not node.partitions]
    return free, ("no node is tied to it (by its queue or Qlist, default_chunk.Qlist or resources_default.neednodes):"
                  " taken as the nodes no queue holds",)


def with_queues(nodes: list[NodeFacts], queues: list[Queue],
                default: str | None) -> tuple[list[NodeFacts], list[PartitionFacts]]:
    """The nodes with the queues each belongs to, and each queue as a partition (the default one: `qstat -Bf`'s
    default_queue; None: no server answered)."""
    members: dict[str, set[str]] = {}
    partitions = []
    for queue in queues:
        tied, notes = _members(queue, nodes)
        members[queue.name] = {node.name for node in tied}
        partitions.append(PartitionFacts(
            queue.name, default=None if default is None else queue.name == default, available=_state(queue),
            time_limit=f"resources_max.walltime {queue.walltime}" if queue.walltime else None, nodes=len(tied),
            limits=queue.limits, notes=notes, source="qstat -Qf"))
    placed = [replace(node, partitions=tuple(q.name for q in queues if node.name in members[q.name]))
              for node in nodes]
    return placed, partitions


def _answer(argv: list[str]) -> str | None:
    """What a command that may be missing or refuse prints; None then (the view is drawn without it)."""
    proc = installed_tool(argv)
    return proc.stdout if proc is not None and proc.returncode == 0 else None


def _view(source: str, nodes: list[NodeFacts], labels: dict[str, str]) -> ClusterView:
    """The nodes with the queues `qstat -Qf` ties them to, where it answers."""
    queues_text = _answer(["qstat", "-Qf"])
    queues = parse_qstat_queues(queues_text) if queues_text is not None else []
    if not queues:
        return ClusterView(source, tuple(nodes), (), labels=labels)
    server_text = _answer(["qstat", "-Bf"])
    placed, partitions = with_queues(nodes, queues, default_queue(server_text) if server_text else None)
    asked = f"{source}, qstat -Qf" + (", qstat -Bf" if server_text else "")
    return ClusterView(asked, tuple(placed), tuple(partitions), labels=labels)


def cluster_view() -> ClusterView | None:
    """This cluster as `pbsnodes` (and `qstat`) describe it; None without PBS's client tools."""
    proc = installed_tool(["pbsnodes", "-a", "-F", "json"])
    if proc is None:
        return None
    if proc.returncode == 0 and proc.stdout.lstrip().startswith("{"):
        labels = {**LABELS, "gpu_type": "resources_available.gputype"} if "gputype" in proc.stdout.lower() else LABELS
        return _view("pbsnodes -a -F json", parse_pbsnodes_json(proc.stdout), labels)
    text = installed_tool(["pbsnodes", "-a"])  # Torque and PBS before 18 know no -F
    if text is None or text.returncode != 0:
        said = _line((text.stderr or text.stdout) if text is not None else "")
        raise SchedulerError(f"pbsnodes -a failed: {said}")
    return _view("pbsnodes -a", parse_pbsnodes(text.stdout), labels_of(bounded(text.stdout)))
