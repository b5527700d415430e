"""How busy this node is right now: what other processes use of its CPUs over a short look at /proc/stat
(less this process's own use), and the load average. Read before a local run starts (`dlrun run`,
`dlrun reproduce`), which warns when the node is busy (dlrun.results.quality.busy_warning)."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from dlrun.harness.harness_node import node_cpu_ticks
from dlrun.probe.sysfs import read_text


@dataclass(frozen=True)
class NodeLoad:
    others_cpus: float | None   # CPUs' worth of time other processes used while we looked
    cpus: int | None            # the node's CPUs (as /proc/stat lists them)
    load1: float | None         # the 1-minute load average


def _stat(root: Path) -> tuple[int, int, int] | None:
    """(busy, total) ticks over every CPU, and the CPU count, from /proc/stat (read as the harness reads it)."""
    found = node_cpu_ticks(read_text(root / "proc" / "stat") or "")
    return (found[0], found[1], found[2] or 0) if found else None


def _own_seconds() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


class NodeWatch:
    """A look at the node begun now and read later (`load`): what this process does meanwhile (its threads'
    CPU time and its waited-for children's) is left out as its own, so a look begun when `dlrun run` starts
    costs no wall time of its own once the pre-run steps have lasted the look's length."""

    def __init__(self, root: Path = Path("/")) -> None:
        self.root, self.began = root, time.monotonic()
        self.before, self.own = _stat(root), _own_seconds()

    def load(self, seconds: float) -> NodeLoad:
        """The node's load over at least `seconds` since the watch began (sleeping for what is left)."""
        left = seconds - (time.monotonic() - self.began)
        if left > 0:
            time.sleep(left)
        after, own = _stat(self.root), _own_seconds() - self.own
        try:
            load1 = os.getloadavg()[0]
        except OSError:
            load1 = None
        before = self.before
        if before is None or after is None or after[1] <= before[1]:
            return NodeLoad(None, after[2] if after else None, load1)
        hz = os.sysconf("SC_CLK_TCK")
        busy, total = (after[0] - before[0]) / hz, (after[1] - before[1]) / hz
        others = max(0.0, busy - own) / total * after[2]  # the busy share of the node, in CPUs
        return NodeLoad(round(others, 2), after[2], load1)


def node_load(seconds: float, root: Path = Path("/")) -> NodeLoad:
    """Watch the node for `seconds` (sleeping, so dlrun itself uses next to nothing of it)."""
    return NodeWatch(root).load(seconds)
