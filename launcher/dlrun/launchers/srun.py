"""`srun` (Slurm), PMIx: Slurm starts every rank itself, `--kill-on-bad-exit=1` ends the step as soon as
one rank fails (no hang), one output file per rank. With the enroot runtime, pyxis flags go here."""
from __future__ import annotations

from dlrun.job import RUN_DIR_VAR, Launch, RankCommand
from dlrun.launchers.base import Launcher, SchedulerView, gpu_affinity_argv, mca_env, numa_map
from dlrun.plan import Plan
from dlrun.registry import LAUNCHERS, Tool
from dlrun.shell import Expand

SLURM_RANK_ENV = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_STEP_ID",
                  "SLURM_JOB_ID", "PMIX_RANK", "PMIX_NAMESPACE", "CUDA_VISIBLE_DEVICES")
SLURM_RANK_PREFIXES = ("SLURM_", "PMIX_", "PMI_", "OMPI_")


def rank_dirs_setup(world_size: int) -> list[str]:
    # srun opens --output files itself but does not create their directories.
    return [f'mkdir -p "${{{RUN_DIR_VAR}}}"/logs/rank.{{0..{world_size - 1}}}']


@LAUNCHERS.register("srun")
class SrunLauncher(Launcher):
    tool = Tool("srun", "the Slurm client (Debian: apt-get install slurm-client)")
    rank_env_names = SLURM_RANK_ENV
    rank_env_prefixes = SLURM_RANK_PREFIXES

    def supports(self, scheduler: SchedulerView) -> bool:
        return self.name in scheduler.step_launchers

    def wrap(self, plan: Plan, rank: RankCommand, scheduler: SchedulerView) -> Launch:
        argv = ["srun", f"--mpi={plan.scheduler_options.srun_mpi}", f"--nodes={plan.nodes}",
                f"--ntasks={plan.world_size}", f"--ntasks-per-node={plan.ranks_per_node}",
                f"--cpus-per-task={plan.threads_per_rank}", "--kill-on-bad-exit=1", "--export=ALL",
                Expand("--output=${" + RUN_DIR_VAR + "}/logs/rank.%t/stdout"),
                Expand("--error=${" + RUN_DIR_VAR + "}/logs/rank.%t/stderr")]
        if numa_map(plan) and gpu_affinity_argv(plan):
            argv.append("--cpu-bind=none")  # each rank binds itself to its GPU's NUMA node
        argv += list(rank.launcher_args) + list(plan.launcher_args)
        argv += gpu_affinity_argv(plan) + rank.argv
        return Launch(argv=argv, env={**mca_env(plan), **rank.env}, rank_log_pattern="logs/rank.{rank}/stdout",
                      setup=rank_dirs_setup(plan.world_size))
