"""`dlrun diagnose`: which node or link of a set is slower than the others, and than the site's baseline.

The bisection users do by hand (NVIDIA/nccl#349: "find the slow node"), made systematic: a short collective on
every pair of nodes (the pairs of a round share no node, so a round's jobs run at once), optionally a short
training run on every node alone, each stored as an ordinary run tagged experiment `diagnose`, point the nodes'
names. Then (dlrun.diagnose.verdict):

- the pairs' reference is the median of their best quarter (at least one pair): with one slow node among N,
  2/N of the pairs are slow, a majority for N = 3, so no median of all pairs can be the reference;
- a pair is slow below `threshold` x the reference; a node is slow when every pair it is in is slow and some
  pair without it is not; a slow pair whose two nodes are not slow is a slow link;
- each probe is also judged against the site's baseline for its key (dlrun.results.compare.history: the last N
  ok runs stored before the diagnosis began, their median and 95 % prediction interval), which sees what no
  comparison among the pairs can: every pair slow at once.
"""
from __future__ import annotations

from dlrun.diagnose.pairs import rounds
from dlrun.diagnose.verdict import Finding, Probe, attribute

__all__ = ["Finding", "Probe", "attribute", "rounds"]
