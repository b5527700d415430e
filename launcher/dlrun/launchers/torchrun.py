"""`torchrun` (torch.distributed.run, PyTorch >= 1.10): runs inside the image, once per node, and starts the
node's ranks itself. One per node is started by the scheduler's own tool (srun, mpiexec, jsrun); on one
local node it runs directly. Multi-node rendezvous is c10d at MASTER_ADDR:MASTER_PORT."""
from __future__ import annotations

import re

from dlrun.errors import UsageError
from dlrun.registry import LAUNCHERS
from dlrun.launchers.base import Launch, Launcher, gpu_affinity_argv, require_scheduler
from dlrun.launchers.mpirun import ROOT_OK, mpirun_argv, mpirun_hosts
from dlrun.plan import Plan
from dlrun.render import Expand, RankCommand

MIN_TORCH = (1, 10)


def _version_tuple(text: str | None) -> tuple[int, ...] | None:
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


@LAUNCHERS.register("torchrun")
class TorchrunLauncher(Launcher):
    def check(self, plan: Plan) -> None:
        require_scheduler(self.name, plan, ("local", "slurm", "pbs", "lsf"))
        if plan.scheduler == "local" and plan.nodes > 1:
            raise UsageError(f"--nodes {plan.nodes} with scheduler local; valid: --nodes 1, or a batch scheduler")
        version = _version_tuple(plan.image.framework_version)
        if plan.image.framework != "pytorch" or (version is not None and version < MIN_TORCH):
            raise UsageError(f"launcher torchrun needs PyTorch >= 1.10, but image {plan.image.name!r} has "
                             f"{plan.image.framework} {plan.image.framework_version}; valid: --launcher mpirun or srun")

    def prepare(self, plan: Plan, rank: RankCommand) -> RankCommand:
        python, *script = rank.argv
        argv = [python, "-m", "torch.distributed.run", "--nnodes", str(plan.nodes),
                "--nproc_per_node", str(plan.ranks_per_node), "--max_restarts", "0"]
        if plan.nodes == 1:
            argv.append("--standalone")
        else:
            argv += ["--rdzv_backend", "c10d", "--rdzv_endpoint", Expand("${MASTER_ADDR}:${MASTER_PORT}"),
                     "--rdzv_id", plan.job_name]
        argv += list(plan.launcher_args)  # torchrun's own options, before the program
        affinity = gpu_affinity_argv(plan)
        if affinity:
            argv += ["--no_python", *affinity, python, *script]
        else:
            argv += script
        return RankCommand(argv=argv, env=rank.env, passthrough=rank.passthrough,
                           passthrough_prefixes=rank.passthrough_prefixes, launcher_args=rank.launcher_args)

    def wrap(self, plan: Plan, rank: RankCommand) -> Launch:
        if plan.scheduler == "local":
            return Launch(argv=rank.argv, env=rank.env, rank_log_pattern="output.log")
        if plan.scheduler == "slurm":
            from dlrun.launchers.srun import mca_env

            argv = ["srun", f"--nodes={plan.nodes}", f"--ntasks={plan.nodes}", "--ntasks-per-node=1",
                    f"--cpus-per-task={plan.threads_per_rank * plan.ranks_per_node}", "--kill-on-bad-exit=1",
                    "--export=ALL", *rank.launcher_args, *rank.argv]
            return Launch(argv=argv, env={**mca_env(plan), **rank.env}, rank_log_pattern="output.log")
        if plan.scheduler == "lsf":
            argv = ["jsrun", "--nrs", str(plan.nodes), "--rs_per_host", "1", "--tasks_per_rs", "1",
                    "--cpu_per_rs", "ALL_CPUS", "--gpu_per_rs", "ALL_GPUS", "--smpiargs=off", *rank.argv]
            return Launch(argv=argv, env=rank.env, rank_log_pattern="output.log")
        hosts, setup = mpirun_hosts(plan, 1)
        argv = mpirun_argv(plan, sorted(rank.env), hosts, np=plan.nodes) + rank.argv
        return Launch(argv=argv, env={**rank.env, **ROOT_OK}, rank_log_pattern="logs/1/rank.{rank}/stdout",
                      setup=setup)

