from __future__ import annotations

from dataclasses import dataclass, field

from dlrun.plan import Plan
from dlrun.render import RankCommand


@dataclass(frozen=True)
class Launch:
    """The command that starts every rank, the environment to export first, and where rank logs go."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    rank_log_pattern: str = "logs/rank.{rank}/stdout"
    setup: list[str] = field(default_factory=list)  # shell lines to run before the launch (already quoted)


class Launcher:
    def __init__(self, name: str):
        self.name = name

    def wrap(self, plan: Plan, rank: RankCommand) -> Launch:
        raise NotImplementedError
