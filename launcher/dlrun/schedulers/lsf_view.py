"""LSF's view of a cluster for `dlrun systems init`: `lshosts -w` (every host's type, CPUs, memory, whether it is a
server host, its static resources) and `bhosts -w` (each host's batch status and job slots), read from the tables
the commands print (IBM Spectrum LSF, and OpenLava's descendants, which print the same).

`lshosts` columns: HOST_NAME type model cpuf ncpus maxmem maxswp server RESOURCES; `-` where the host does not
say (a client host: server `No`), memory with its unit (`7.5G`, `32012M`). Without `-w` LSF cuts host names to
eleven characters, so dlrun asks with `-w`. `bhosts` columns: HOST_NAME STATUS JL/U MAX NJOBS RUN SSUSP USUSP RSV.
Neither names a host's queues (LSF's queues list hosts in `bqueues -l`), so the view has no partitions: the
server hosts that take jobs are one set of nodes."""
from __future__ import annotations

import re

from dlrun.schedulers.base import ClusterView, NodeFacts, tool_output

#: The words of LSF's tables that the draft names as each value's source.
LABELS = {"cpus": "ncpus", "memory": "maxmem", "arch": "type"}
_MIB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
#: LSF host types (lsf.shared HostType) that name the machine's architecture.
_ARCH = {"X86_64": "x86_64", "LINUX64": "x86_64", "LINUXPPC64LE": "ppc64le", "LINUXPPC64": "ppc64le",
         "LINUX_ARM64": "aarch64", "AARCH64": "aarch64"}


def _mib(text: str) -> int | None:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT])?B?", text)
    return round(float(match.group(1)) * _MIB[match.group(2) or "M"]) if match else None


def _rows(text: str, first: str) -> list[list[str]]:
    """The table's rows after its header line (whose first word is `first`), split on any white space (a published
    table may hold no-break spaces)."""
    rows, seen = [], False
    for line in text.replace("\r\n", "\n").splitlines():
        words = line.split()
        if words and words[0] == first:
            seen = True
        elif words and seen:
            rows.append(words)
    return rows


def parse_lshosts(text: str) -> list[NodeFacts]:
    """The server hosts of an `lshosts` table (client hosts, server `No`, run no jobs)."""
    nodes = []
    for words in _rows(text, "HOST_NAME"):
        if len(words) < 8 or words[7] == "No":
            continue
        resources = " ".join(words[8:]).strip("()")
        nodes.append(NodeFacts(name=words[0], cpus=int(words[4]) if words[4].isdigit() else None,
                               memory_mib=_mib(words[5]), arch=_ARCH.get(words[1].upper()),
                               features=tuple(resources.split())))
    return nodes


def parse_bhosts(text: str) -> dict[str, tuple[str, int | None]]:
    """Host name -> (batch status, job slots) of a `bhosts` table."""
    return {words[0]: (words[1], int(words[3]) if words[3].isdigit() else None)
            for words in _rows(text, "HOST_NAME") if len(words) >= 4}


def batch_hosts(hosts: list[NodeFacts], batch: dict[str, tuple[str, int | None]]) -> list[NodeFacts]:
    """The hosts that take batch jobs: in `bhosts` with job slots (a management host has none), by the name or its
    short form (bhosts -w may print the full domain name)."""
    def slots(host: NodeFacts) -> int | None:
        for name, (_, count) in batch.items():
            if host.name in (name, name.split(".")[0]) or host.name.split(".")[0] == name.split(".")[0]:
                return count
        return 0

    return [host for host in hosts if (slots(host) or 0) > 0]


def cluster_view() -> ClusterView | None:
    """This cluster as LSF's tools describe it; None without LSF's client tools."""
    hosts_text = tool_output(["lshosts", "-w"])
    if hosts_text is None:
        return None
    hosts = batch_hosts(parse_lshosts(hosts_text), parse_bhosts(tool_output(["bhosts", "-w"]) or ""))
    return ClusterView("lshosts -w, bhosts -w", tuple(hosts), (), labels=LABELS)
