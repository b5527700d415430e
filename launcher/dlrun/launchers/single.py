"""`none`: one rank, started directly (no MPI)."""
from __future__ import annotations

from dlrun.registry import LAUNCHERS
from dlrun.launchers.base import Launch, Launcher, require_no_launcher_args, require_scheduler
from dlrun.plan import Plan
from dlrun.render import RankCommand


@LAUNCHERS.register("none")
class SingleRankLauncher(Launcher):
    def check(self, plan: Plan) -> None:
        require_scheduler(self.name, plan, ("local", "slurm", "pbs", "lsf"))
        if plan.world_size != 1:
            from dlrun.errors import UsageError

            raise UsageError(f"launcher 'none' starts exactly one rank, but the plan has {plan.world_size}; "
                             "valid: a multi-rank launcher such as mpirun")
        if plan.launcher_args:
            from dlrun.errors import UsageError

            raise UsageError(f"launcher 'none' takes no launcher arguments, got {plan.launcher_args}; "
                             "valid: a launcher such as mpirun or srun")

    def wrap(self, plan: Plan, rank: RankCommand) -> Launch:
        require_no_launcher_args(self.name, rank)
        return Launch(argv=rank.argv, env=rank.env,
                      rank_log_pattern="logs/rank.0/stdout")
