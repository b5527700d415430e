"""The rounds of a diagnosis: every pair of nodes once, the pairs of one round disjoint (so that they run at
once and none measures a node another pair is using), by the circle method of round-robin tournaments: N - 1
rounds of N / 2 pairs for an even N; for an odd N, N rounds in which one node rests."""
from __future__ import annotations

from typing import Sequence


def rounds(nodes: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Every pair of `nodes` (in their order within a pair) exactly once, grouped into rounds of disjoint
    pairs."""
    if len(set(nodes)) != len(nodes):
        raise ValueError(f"a node is named twice in {', '.join(nodes)}")
    order = {node: index for index, node in enumerate(nodes)}
    seats: list[str | None] = [*nodes, None] if len(nodes) % 2 else list(nodes)
    found = []
    for _ in range(len(seats) - 1):
        half = len(seats) // 2
        pairs = [(seats[i], seats[-1 - i]) for i in range(half)]
        found.append([tuple(sorted((a, b), key=order.__getitem__)) for a, b in pairs
                      if a is not None and b is not None])
        seats = [seats[0], seats[-1], *seats[1:-1]]  # the first seat stays, the others turn
    return [[(a, b) for a, b in pairs] for pairs in found if pairs]
