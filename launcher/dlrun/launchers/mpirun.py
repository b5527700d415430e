"""`mpirun` (OpenMPI), hybrid model: the host's mpirun starts one (containerized) process per rank."""
from __future__ import annotations

from dlrun.launchers import LAUNCHERS
from dlrun.launchers.base import Launch, Launcher
from dlrun.plan import Plan
from dlrun.render import RUN_DIR_VAR, Expand, RankCommand

# OpenMPI refuses to run as root unless told; harmless for other users.
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def mpirun_argv(plan: Plan, env_names: list[str], hosts: str | None) -> list[str]:
    argv = ["mpirun", "-np", str(plan.world_size)]
    if hosts:
        argv += ["-H", hosts]
    argv += ["--bind-to", "none", "--map-by", "slot"]
    # Per-rank stdout/stderr files (OpenMPI >= 3: DIR/1/rank.N/{stdout,stderr}); also still shown live.
    argv += ["--output-filename", Expand("${" + RUN_DIR_VAR + "}/logs")]
    for name in env_names:
        argv += ["-x", name]
    return argv


@LAUNCHERS.register("mpirun")
class MpirunLauncher(Launcher):
    def wrap(self, plan: Plan, rank: RankCommand) -> Launch:
        hosts = f"localhost:{plan.ranks_per_node}" if plan.scheduler == "local" and plan.nodes == 1 else None
        argv = mpirun_argv(plan, sorted(rank.env), hosts) + rank.argv
        return Launch(argv=argv, env={**rank.env, **ROOT_OK}, rank_log_pattern="logs/1/rank.{rank}/stdout")
