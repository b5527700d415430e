"""`local`: run the launch command on this machine from a bash script in the run directory."""
from __future__ import annotations

from dlrun.launchers.base import Launch
from dlrun.plan import Plan
from dlrun.render import RUN_DIR_VAR, RenderedJob, fabric_for, join, script_header
from dlrun.registry import SCHEDULERS
from dlrun.schedulers.base import Scheduler, export_lines

__all__ = ["LocalScheduler", "export_lines"]


@SCHEDULERS.register("local")
class LocalScheduler(Scheduler):
    def check(self, plan: Plan) -> None:
        if plan.nodes > 1:
            from dlrun.errors import UsageError

            raise UsageError(f"--nodes {plan.nodes} with scheduler local: a local run has one node; "
                             "valid: --nodes 1, or a batch scheduler (slurm, pbs, lsf, kubernetes)")

    def render(self, plan: Plan, launch: Launch) -> RenderedJob:
        lines = script_header(plan, "local run") + [
            "set -euo pipefail",
            # The run directory is where this script lives unless the executor says otherwise.
            f': "${{{RUN_DIR_VAR}:=$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)}}"',
            f"export {RUN_DIR_VAR}",
            f'mkdir -p "${{{RUN_DIR_VAR}}}/logs"',
            *fabric_for(plan).setup,  # values only the node can know (the RoCE GID index)
            *launch.setup,
            *export_lines(launch.env),
            f"exec {join(launch.argv)}",
        ]
        return RenderedJob(script="\n".join(lines) + "\n", submit_argv=["bash", "run.sh"],
                           scheduler=self.name, rank_log_pattern=launch.rank_log_pattern)
