"""`host`: no container; the rank command runs as it is."""
from __future__ import annotations

from dlrun.job import RankCommand
from dlrun.plan import Plan
from dlrun.registry import RUNTIMES
from dlrun.runtimes.base import Runtime


@RUNTIMES.register("host")
class HostRuntime(Runtime):
    def wrap(self, plan: Plan, rank: RankCommand) -> RankCommand:
        return rank
