"""`horovodrun` in MPI mode: it builds and runs the mpirun command itself and forwards the environment
(`-x` for every exported variable); dlrun passes the fabric's MCA settings through `--mpi-args`."""
from __future__ import annotations

from typing import TYPE_CHECKING

from dlrun.job import RUN_DIR_VAR, Launch, RankCommand
from dlrun.launchers.base import Launcher, gpu_affinity_argv, require_no_launcher_args
from dlrun.launchers.mpirun import OMPI_RANK_ENV, OMPI_RANK_PREFIXES, ROOT_OK, mpirun_hosts
from dlrun.plan import Plan, fabric_for
from dlrun.registry import LAUNCHERS, Tool
from dlrun.shell import Expand

if TYPE_CHECKING:
    from dlrun.schedulers.base import Scheduler


@LAUNCHERS.register("horovodrun")
class HorovodrunLauncher(Launcher):
    tool = Tool("horovodrun", "Horovod (pip install horovod)")
    rank_env_names = OMPI_RANK_ENV
    rank_env_prefixes = OMPI_RANK_PREFIXES

    def wrap(self, plan: Plan, rank: RankCommand, scheduler: "Scheduler") -> Launch:
        require_no_launcher_args(self.name, rank)
        hosts, setup = mpirun_hosts(scheduler, plan.ranks_per_node)
        mca = fabric_for(plan).mca
        # dlrun's own words only: horovodrun pastes this string into the mpirun command line it runs.
        mpi_args = " ".join(["--bind-to none --map-by slot", *(f"-mca {k} {v}" for k, v in mca.items())])
        argv = ["horovodrun", "-np", str(plan.world_size)]
        if hosts:
            argv += ["-H", hosts]
        argv += ["--mpi", "--mpi-args", mpi_args, "--output-filename", Expand("${" + RUN_DIR_VAR + "}/logs")]
        tcp = plan.system.fabric_config.get("tcp")
        if plan.fabric == "tcp" and tcp and tcp.interfaces:
            argv += ["--network-interface", ",".join(tcp.interfaces)]
        argv += list(plan.launcher_args) + gpu_affinity_argv(plan) + rank.argv
        return Launch(argv=argv, env={**rank.env, **ROOT_OK}, rank_log_pattern="logs/1/rank.{rank}/stdout",
                      setup=setup)
