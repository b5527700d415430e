"""`torchrun` (torch.distributed.run, PyTorch >= 1.10): runs inside the image, once per node, and starts the
node's ranks itself. The scheduler starts the one-per-node copies with its own tool (srun, mpiexec, jsrun;
directly on one local node). Multi-node rendezvous is c10d at MASTER_ADDR:MASTER_PORT. A failed rank is read
from torchrun's "Root Cause (first observed failure)" report (tests/data/logs/launcher-failures)."""
from __future__ import annotations

import re

from dlrun.errors import UsageError
from dlrun.job import Launch, RankCommand, RankFailure
from dlrun.launchers.base import Launcher, SchedulerView, gpu_affinity_argv
from dlrun.plan import Plan
from dlrun.registry import LAUNCHERS
from dlrun.shell import Expand

MIN_TORCH = (1, 10)
TORCHRUN_ROOT = re.compile(r"Root Cause \(first observed failure\): \[\d+\]: time ?: \S+ host ?: (?P<host>\S+) "
                           r"rank ?: (?P<rank>\d+)(?: \(local_rank: \d+\))? exitcode ?: (?P<code>-?\d+)")


def _version_tuple(text: str | None) -> tuple[int, ...] | None:
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


@LAUNCHERS.register("torchrun")
class TorchrunLauncher(Launcher):
    def rank_failure(self, text: str) -> RankFailure | None:
        match = TORCHRUN_ROOT.search(" ".join(text.split()))  # its report is a table over several lines
        if not match:
            return None
        rank, host, code = int(match.group("rank")), match.group("host"), int(match.group("code"))
        # torchrun: negative exit codes are signals
        return RankFailure("torchrun", rank, host, signal=-code if code < 0 else None,
                           exit_code=code if code >= 0 else None)

    def check(self, plan: Plan, scheduler: SchedulerView) -> None:
        super().check(plan, scheduler)
        version = _version_tuple(plan.image.framework_version)
        if plan.image.framework != "pytorch" or (version is not None and version < MIN_TORCH):
            raise UsageError(f"launcher torchrun needs PyTorch >= 1.10, but image {plan.image.name!r} has "
                             f"{plan.image.framework} {plan.image.framework_version}; valid: --launcher mpirun or srun")

    def prepare(self, plan: Plan, rank: RankCommand) -> RankCommand:
        # torchrun is the image's Python's module; it starts each rank's command: a Python script as its own
        # argument, anything else (a site's `bash -c` command, a binary) after --no_python.
        python = plan.image.python
        program = list(rank.argv)
        argv = [python, "-m", "torch.distributed.run", "--nnodes", str(plan.nodes),
                "--nproc_per_node", str(plan.ranks_per_node), "--max_restarts", "0"]
        if plan.nodes == 1:
            argv.append("--standalone")
        else:
            argv += ["--rdzv_backend", "c10d", "--rdzv_endpoint", Expand("${MASTER_ADDR}:${MASTER_PORT}"),
                     "--rdzv_id", plan.job_name]
        argv += list(plan.launcher_args)  # torchrun's own options, before the program
        affinity = gpu_affinity_argv(plan)
        if affinity or program[0] != python:
            argv += ["--no_python", *affinity, *program]
        else:
            argv += program[1:]
        return rank.with_argv(argv)

    def wrap(self, plan: Plan, rank: RankCommand, scheduler: SchedulerView) -> Launch:
        return scheduler.per_node_launch(plan, rank)
