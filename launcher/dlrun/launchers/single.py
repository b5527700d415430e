"""`none`: one rank, started directly (no MPI)."""
from __future__ import annotations

from dlrun.launchers import LAUNCHERS
from dlrun.launchers.base import Launch, Launcher
from dlrun.plan import Plan
from dlrun.render import RankCommand


@LAUNCHERS.register("none")
class SingleRankLauncher(Launcher):
    def wrap(self, plan: Plan, rank: RankCommand) -> Launch:
        if plan.world_size != 1:
            from dlrun.errors import UsageError

            raise UsageError(f"launcher 'none' starts exactly one rank, but the plan has {plan.world_size}; "
                             "valid: a multi-rank launcher such as mpirun")
        return Launch(argv=rank.argv, env=rank.env, rank_log_pattern="logs/rank.0/stdout")
