"""`none`: one rank, started directly (no MPI); on a GPU node bound to its GPU's NUMA node like every launcher's ranks."""
from __future__ import annotations

from dlrun.errors import UsageError
from dlrun.job import Launch, RankCommand
from dlrun.launchers.base import Launcher, SchedulerView, gpu_affinity_argv, require_no_launcher_args
from dlrun.plan import Plan
from dlrun.registry import LAUNCHERS


@LAUNCHERS.register("none")
class SingleRankLauncher(Launcher):
    def check(self, plan: Plan, scheduler: SchedulerView) -> None:
        super().check(plan, scheduler)
        if plan.world_size != 1:
            raise UsageError(f"launcher 'none' starts exactly one rank, but the plan has {plan.world_size}; "
                             "valid: a multi-rank launcher such as mpirun")
        if plan.launcher_args:
            raise UsageError(f"launcher 'none' takes no launcher arguments, got {plan.launcher_args}; "
                             "valid: a launcher such as mpirun or srun")

    def wrap(self, plan: Plan, rank: RankCommand, scheduler: SchedulerView) -> Launch:
        require_no_launcher_args(self.name, rank)
        return Launch(argv=gpu_affinity_argv(plan) + rank.argv, env=rank.env, rank_log_pattern="logs/rank.0/stdout")
