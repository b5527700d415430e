"""`host`: no container; the rank command runs as it is."""
from __future__ import annotations

from dlrun.plan import Plan
from dlrun.render import RankCommand
from dlrun.registry import RUNTIMES
from dlrun.runtimes.base import Runtime


@RUNTIMES.register("host")
class HostRuntime(Runtime):
    def wrap(self, plan: Plan, rank: RankCommand) -> RankCommand:
        return rank
