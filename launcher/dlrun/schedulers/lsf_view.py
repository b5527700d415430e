"""LSF's view of a cluster for `dlrun systems init`: `lshosts -w` (every host's type, CPUs, memory, whether it is a
server host, its static resources), `bhosts -w` (each host's batch status and job slots), `bqueues -l` (the
queues, LSF's partitions: each one's hosts, description, state and limits) and `bmgroup -w -r` (the hosts of each
host group a queue names), read from the text the commands print (IBM Spectrum LSF, Platform LSF, and OpenLava's
descendants, which print the same).

`lshosts` columns: HOST_NAME type model cpuf ncpus maxmem maxswp server RESOURCES; `-` where the host does not
say (a client host: server `No`), memory with its unit (`7.5G`, `32012M`). Without `-w` LSF cuts host names to
eleven characters (and `bmgroup` its group names to twelve), so dlrun asks with `-w`. `bhosts` columns:
HOST_NAME STATUS JL/U MAX NJOBS RUN SSUSP USUSP RSV.

`bqueues -l` prints one record per queue: `QUEUE: NAME`, the description on the lines after it (`  -- ...`) up to
a blank line, the PARAMETERS/STATISTICS table (STATUS `Open:Active`), limits as a line of words ending in LIMIT
with their values on the next line (`RUNLIMIT` / `360.0 min of hostA`; under `DEFAULT LIMITS:` the defaults),
and `HOSTS:` the hosts jobs of the queue may run on: host names, host groups (`name/`), `all` (`all hosts used
by the LSF Batch system` where none is configured), `others` (every host not named otherwise), `~name`
(excluded), each maybe with a preference (`hostA+2`), or `host@cluster` (another cluster's). A group `bmgroup`
does not list, and any word that names no host that takes batch jobs here, is said so in the queue's notes, never
guessed. `bqueues -l` names no default queue (that is `bparams`), so no queue is the default: without
`--partition` the draft's system is every batch host, each queue an entry of `partitions`.

Every command's output is data: read up to a size budget, never run, names kept only where they are words a
directive may hold, text shown only as plain single lines."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from dlrun.catalog.models import DIRECTIVE_WORD
from dlrun.schedulers.base import ClusterView, NodeFacts, PartitionFacts, installed_tool, tool_output
from dlrun.text import plain

#: The words of LSF's tables that the draft names as each value's source; `select`: how a job names a queue.
LABELS = {"cpus": "ncpus", "memory": "maxmem", "arch": "type", "select": "bsub -q"}
_MIB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
#: LSF host types (lsf.shared HostType) that name the machine's architecture.
_ARCH = {"X86_64": "x86_64", "LINUX64": "x86_64", "LINUXPPC64LE": "ppc64le", "LINUXPPC64": "ppc64le",
         "LINUX_ARM64": "aarch64", "AARCH64": "aarch64"}
#: What is read of one command's output (LSF's own outputs of a 2500-host cluster are under 300 KiB).
MAX_OUTPUT_CHARS = 32 << 20
MAX_TEXT = 200            # characters of a description or a limit kept
MAX_NOTES = 6             # unresolved words named per queue (then a count of the rest)
MAX_GROUP_DEPTH = 8       # host groups within host groups followed
_LIMIT_WORD = re.compile(r"[A-Z][A-Z_]*LIMIT")
_QUEUE_NAME = re.compile(DIRECTIVE_WORD)


def _mib(text: str) -> int | None:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT])?B?", text)
    return round(float(match.group(1)) * _MIB[match.group(2) or "M"]) if match else None


def bounded(text: str) -> str:
    """A command's output within the size budget (the rest is not read)."""
    return text[:MAX_OUTPUT_CHARS]


def _line(text: str) -> str:
    """Outside text as one plain line (no control or bidi characters, no line breaks), within MAX_TEXT."""
    return " ".join(plain(text, newlines=False).split())[:MAX_TEXT]


def _rows(text: str, first: str) -> list[list[str]]:
    """The table's rows after its header line (whose first word is `first`), split on any white space (a published
    table may hold no-break spaces)."""
    rows, seen = [], False
    for line in bounded(text).replace("\r\n", "\n").splitlines():
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
        nodes.append(NodeFacts(name=_line(words[0]), cpus=int(words[4]) if words[4].isdigit() else None,
                               memory_mib=_mib(words[5]), arch=_ARCH.get(words[1].upper()),
                               features=tuple(_line(word) for word in resources.split())))
    return nodes


def parse_bhosts(text: str) -> dict[str, tuple[str, int | None]]:
    """Host name -> (batch status, job slots) of a `bhosts` table."""
    return {words[0]: (words[1], int(words[3]) if words[3].isdigit() else None)
            for words in _rows(text, "HOST_NAME") if len(words) >= 4}


def batch_hosts(hosts: list[NodeFacts], batch: dict[str, tuple[str, int | None]]) -> list[NodeFacts]:
    """The hosts that take batch jobs: in `bhosts` with job slots (a management host has none), by the name or its
    short form (bhosts -w may print the full domain name)."""
    slots = {}
    for name, (_, count) in batch.items():
        slots.setdefault(name, count)
        slots.setdefault(name.split(".")[0], count)
    return [host for host in hosts if (slots.get(host.name, slots.get(host.name.split(".")[0])) or 0) > 0]


# ------------------------------------------------------------------------------------------------ bqueues -l
@dataclass(frozen=True)
class Queue:
    """One record of `bqueues -l`: `hosts` are the HOSTS words (None: the record has no HOSTS line); `limits` the
    (word, value) pairs, a default limit's word prefixed `default `."""

    name: str
    description: str | None = None
    status: str | None = None
    hosts: tuple[str, ...] | None = None
    limits: tuple[tuple[str, str], ...] = ()


def _limit_values(header: str, values: str) -> list[tuple[str, str]]:
    """A line of limit words and the line under it: each value is the text from its word's column to the next
    word's (`CORELIMIT MEMLIMIT` over `     0 M     3.9 G`); one word takes the whole line."""
    starts = [match.start() for match in re.finditer(r"\S+", header)]
    words = header.split()
    if len(words) == 1:
        return [(words[0], _line(values))]
    ends = starts[1:] + [len(values) + 1]
    return [(word, _line(values[start if i else 0:end]))
            for i, (word, start, end) in enumerate(zip(words, starts, ends))]


def _description(lines: list[str]) -> str | None:
    """The description: the lines after `QUEUE: NAME` (`  -- ...`) up to a blank line."""
    said = []
    for line in lines[1:]:
        if not line.strip() or line.strip() == "PARAMETERS/STATISTICS":
            break
        said.append(line.strip().removeprefix("--").strip())
    return _line(" ".join(said)) or None


def _hosts(line: str) -> tuple[str, ...]:
    listed = line.split(":", 1)[1].split()
    return ("all",) if listed[:3] == ["all", "hosts", "used"] else tuple(_line(word) for word in listed)


def _queue(lines: list[str]) -> Queue | None:
    """One queue's record (its first line `QUEUE: NAME`); None where the name is no word a directive may hold."""
    name = lines[0].split(":", 1)[1].strip()
    if not _QUEUE_NAME.match(name):
        return None
    status, hosts, limits, section = None, None, [], ""
    for i, line in enumerate(lines):
        words, line, following = line.split(), line.strip(), lines[i + 1] if i + 1 < len(lines) else ""
        if words[:3] == ["PRIO", "NICE", "STATUS"] and len(following.split()) > 2:
            status = _line(following.split()[2])
        elif line.startswith(("DEFAULT LIMITS:", "MAXIMUM LIMITS:", "SCHEDULING")):
            section = "default " if line.startswith("DEFAULT") else ""
        elif words and all(_LIMIT_WORD.fullmatch(word) for word in words):
            limits += [(section + word, value) for word, value in _limit_values(lines[i], following) if value]
        elif line.startswith("HOSTS:"):
            hosts = _hosts(line)
    return Queue(name, _description(lines), status, hosts, tuple(limits))


def parse_bqueues(text: str) -> list[Queue]:
    """The queues of `bqueues -l`, in order (a queue whose name no directive may hold is left out)."""
    records: list[list[str]] = []
    for line in bounded(text).replace("\r\n", "\n").splitlines():
        if line.startswith("QUEUE:"):
            records.append([line])
        elif records:
            records[-1].append(line)
    return [queue for queue in map(_queue, records) if queue is not None]


def parse_bmgroup(text: str) -> dict[str, tuple[str, ...] | None]:
    """Host group name -> its member words, of `bmgroup` (with -r: host names; without, subgroups `name/` too);
    None for a name printed twice (two long names cut to the same twelve characters, without -w)."""
    groups: dict[str, tuple[str, ...] | None] = {}
    for words in _rows(text, "GROUP_NAME"):
        members = tuple(word.strip("()") for word in words[1:] if word.strip("()"))
        groups[words[0]] = None if words[0] in groups else members
    return groups


# ------------------------------------------------------------------------------------------------ a queue's hosts
@dataclass(frozen=True)
class _Hosts:
    """What `resolve_hosts` resolves against: the batch hosts by their short names, the host groups (None: no
    `bmgroup` answered) and what asked for the groups."""

    known: dict[str, str]
    groups: dict[str, tuple[str, ...] | None] | None
    groups_from: str = "bmgroup -w -r"


def _unresolved(where: _Hosts, group: str, depth: int) -> str:
    if where.groups is None:
        return "no `bmgroup` answered here"
    if group not in where.groups:
        return f"{where.groups_from} lists no such group"
    if where.groups[group] is None:
        return f"{where.groups_from} prints two groups of that name"
    return f"groups within groups deeper than {depth}"


def _word_hosts(word: str, where: _Hosts, depth: int) -> tuple[set[str], list[str]]:
    """The batch hosts one HOSTS word names, and what of it names none."""
    word = re.sub(r"\+\d+$", "", word)  # a preference: hostA+2
    if word in ("all", "others"):
        return set(where.known.values()), []
    if word.endswith("/"):
        members = None if where.groups is None else where.groups.get(word[:-1])
        if members is None or depth >= MAX_GROUP_DEPTH:
            return set(), [f"host group {word} not resolved ({_unresolved(where, word[:-1], depth)})"]
        return resolve_hosts(members, where, depth + 1)
    if "@" in word:
        return set(), [f"{word} (another cluster's)"]
    name = where.known.get(word.split(".")[0])
    return ({name}, []) if name else (set(), [f"{word} (not a host that takes batch jobs here)"])


def resolve_hosts(words: tuple[str, ...], where: _Hosts, depth: int = 0) -> tuple[set[str], list[str]]:
    """The batch hosts a queue's HOSTS words (or a host group's members) name: every word's hosts but those of
    the words excluded (`~hostA`, `~group/`); and each word that named none."""
    chosen: set[str] = set()
    excluded: set[str] = set()
    missing: list[str] = []
    for word in words:
        hosts, unresolved = _word_hosts(word.lstrip("~"), where, depth)
        (excluded if word.startswith("~") else chosen).update(hosts)
        missing += unresolved
    return chosen - excluded, missing


def _notes(missing: list[str]) -> tuple[str, ...]:
    unique = list(dict.fromkeys(missing))
    more = len(unique) - MAX_NOTES
    return tuple(unique[:MAX_NOTES]) + ((f"{more} more word(s) of HOSTS name no host here",) if more > 0 else ())


def _time_limit(queue: Queue) -> str | None:
    value = dict(queue.limits).get("RUNLIMIT")
    return f"RUNLIMIT {value}" if value else None


def with_queues(hosts: list[NodeFacts], queues: list[Queue], groups: dict[str, tuple[str, ...] | None] | None,
                groups_from: str = "bmgroup -w -r") -> tuple[list[NodeFacts], list[PartitionFacts]]:
    """The hosts with the queues each belongs to, and each queue as a partition: its hosts' count, state, longest
    job (RUNLIMIT), other limits, description and what of its HOSTS names no host here (`groups`: the host groups
    `groups_from` printed; None: none answered)."""
    where = _Hosts({host.name.split(".")[0]: host.name for host in hosts}, groups, groups_from)
    members: dict[str, set[str]] = {}
    partitions = []
    for queue in queues:
        if queue.hosts is None:
            names, missing = set(), ["its record has no HOSTS line"]
        else:
            names, missing = resolve_hosts(queue.hosts, where)
        members[queue.name] = names
        partitions.append(PartitionFacts(
            queue.name, default=None, available=queue.status, time_limit=_time_limit(queue), nodes=len(names),
            description=queue.description, limits=tuple(pair for pair in queue.limits if pair[0] != "RUNLIMIT"),
            notes=_notes(missing), source="bqueues -l"))
    placed = [replace(host, partitions=tuple(q.name for q in queues if host.name in members[q.name]))
              for host in hosts]
    return placed, partitions


def _answer(argv: list[str]) -> str | None:
    """What a command that may be missing or refuse prints; None then (the view is drawn without it)."""
    proc = installed_tool(argv)
    return proc.stdout if proc is not None and proc.returncode == 0 else None


def cluster_view() -> ClusterView | None:
    """This cluster as LSF's tools describe it; None without LSF's client tools."""
    hosts_text = tool_output(["lshosts", "-w"])
    if hosts_text is None:
        return None
    hosts = batch_hosts(parse_lshosts(hosts_text), parse_bhosts(tool_output(["bhosts", "-w"]) or ""))
    queues_text = _answer(["bqueues", "-l"])
    if queues_text is None:
        return ClusterView("lshosts -w, bhosts -w", tuple(hosts), (), labels=LABELS)
    groups_text = _answer(["bmgroup", "-w", "-r"])
    groups = parse_bmgroup(groups_text) if groups_text is not None else None
    placed, partitions = with_queues(hosts, parse_bqueues(queues_text), groups)
    asked = "lshosts -w, bhosts -w, bqueues -l" + (", bmgroup -w -r" if groups is not None else "")
    return ClusterView(asked, tuple(placed), tuple(partitions), labels=LABELS)
