"""`jsrun` (IBM Job Step Manager under LSF, Summit-class POWER9 systems): one resource set per GPU with its
share of cores (`--nrs --rs_per_host --tasks_per_rs 1 --cpu_per_rs --gpu_per_rs 1 --bind packed:N`).
jsrun binds CPUs and sets CUDA_VISIBLE_DEVICES per resource set itself. The harness does not use Spectrum
MPI (`--smpiargs=off`), so the JSM rank ids are handed to it as RANK / WORLD_SIZE / LOCAL_RANK."""
from __future__ import annotations

from dlrun.job import Launch, RankCommand
from dlrun.launchers.base import Launcher, SchedulerView, require_no_launcher_args
from dlrun.plan import Plan
from dlrun.registry import LAUNCHERS, Tool

JSM_TO_TORCH = ('export RANK="$JSM_NAMESPACE_RANK" WORLD_SIZE="$JSM_NAMESPACE_SIZE" '
                'LOCAL_RANK="$JSM_NAMESPACE_LOCAL_RANK"; exec "$@"')


@LAUNCHERS.register("jsrun")
class JsrunLauncher(Launcher):
    tool = Tool("jsrun", "IBM Job Step Manager (LSF with CSM)")
    rank_env_names = ("JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_LOCAL_RANK", "RANK",
                      "WORLD_SIZE", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES")
    rank_env_prefixes = ("JSM_", "PMIX_", "OMPI_")
    starts_mpi_programs = True
    binds_resource_sets = True  # a resource set's cores are on its GPU's socket (--cpu_per_rs, --bind packed)

    def supports(self, scheduler: SchedulerView) -> bool:
        return self.name in scheduler.step_launchers

    def wrap(self, plan: Plan, rank: RankCommand, scheduler: SchedulerView) -> Launch:
        require_no_launcher_args(self.name, rank)
        cores = plan.threads_per_rank
        gpus = 1 if plan.device == "cuda" else 0
        argv = ["jsrun", "--nrs", str(plan.world_size), "--rs_per_host", str(plan.ranks_per_node),
                "--tasks_per_rs", "1", "--cpu_per_rs", str(cores), "--gpu_per_rs", str(gpus),
                "--bind", f"packed:{cores}", "--launch_distribution", "packed", "--smpiargs=off"]
        argv += list(plan.launcher_args)
        argv += ["bash", "-c", JSM_TO_TORCH, "dlrun-jsm"] + rank.argv
        return Launch(argv=argv, env=rank.env, rank_log_pattern="output.log", whole_nodes=True)
