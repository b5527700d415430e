"""`torchrun` (torch.distributed.run, PyTorch >= 1.10): runs inside the image, once per node, and starts the
node's ranks itself. The scheduler starts the one-per-node copies with its own tool (srun, mpiexec, jsrun;
directly on one local node). Multi-node rendezvous is c10d at MASTER_ADDR:MASTER_PORT."""
from __future__ import annotations

import re

from dlrun.errors import UsageError
from dlrun.job import Launch, RankCommand
from dlrun.launchers.base import Launcher, SchedulerView, gpu_affinity_argv
from dlrun.plan import Plan
from dlrun.registry import LAUNCHERS
from dlrun.shell import Expand

MIN_TORCH = (1, 10)


def _version_tuple(text: str | None) -> tuple[int, ...] | None:
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


@LAUNCHERS.register("torchrun")
class TorchrunLauncher(Launcher):
    def check(self, plan: Plan, scheduler: SchedulerView) -> None:
        super().check(plan, scheduler)
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
        return rank.with_argv(argv)

    def wrap(self, plan: Plan, rank: RankCommand, scheduler: SchedulerView) -> Launch:
        return scheduler.per_node_launch(plan, rank)
