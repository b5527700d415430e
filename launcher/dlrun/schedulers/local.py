"""`local`: run the launch command on this machine from a bash script in the run directory."""
from __future__ import annotations

from dlrun.errors import UsageError
from dlrun.job import RUN_DIR_VAR, Launch, RankCommand, RenderedJob
from dlrun.plan import Plan, fabric_for
from dlrun.registry import SCHEDULERS
from dlrun.schedulers.base import Scheduler, script_header
from dlrun.shell import export_lines, join


@SCHEDULERS.register("local")
class LocalScheduler(Scheduler):
    def check(self, plan: Plan) -> None:
        if plan.nodes > 1:
            raise UsageError(f"--nodes {plan.nodes} with scheduler local: a local run has one node; "
                             "valid: --nodes 1, or a batch scheduler (slurm, pbs, lsf, kubernetes)")

    def per_node_launch(self, plan: Plan, rank: RankCommand) -> Launch:
        return Launch(argv=rank.argv, env=rank.env, rank_log_pattern="output.log")

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
