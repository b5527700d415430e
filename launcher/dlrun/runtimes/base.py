from __future__ import annotations

from dlrun.plan import Plan
from dlrun.render import RankCommand


class Runtime:
    def __init__(self, name: str):
        self.name = name

    def wrap(self, plan: Plan, rank: RankCommand) -> RankCommand:
        raise NotImplementedError
