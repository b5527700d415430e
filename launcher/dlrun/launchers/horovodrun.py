"""`horovodrun` in MPI mode: it builds and runs the mpirun command itself and forwards the environment
(`-x` for every exported variable); dlrun passes the fabric's MCA settings through `--mpi-args`, less the two
horovodrun always gives OpenMPI itself (`-mca pml ob1 -mca btl ^openib`, and btl_tcp_if_include from its
`--network-interface` or the interfaces it finds; mpirun refuses a parameter given twice). A fabric that needs another pml (UCX, PSM2) cannot run under horovodrun: `--launcher mpirun`
starts the same Horovod ranks with the fabric's settings."""
from __future__ import annotations

from dlrun.errors import UsageError
from dlrun.job import RUN_DIR_VAR, Launch, RankCommand, RankFailure
from dlrun.launchers.base import Launcher, SchedulerView, gpu_affinity_argv, require_no_launcher_args
from dlrun.launchers.mpirun import (OMPI_JOB_MARKERS, OMPI_RANK_ENV, OMPI_RANK_PREFIXES, mpirun_hosts, root_ok,
                                   open_mpi_rank_failure)
from dlrun.plan import Plan, fabric_for
from dlrun.registry import LAUNCHERS, Tool
from dlrun.shell import Expand


# What horovodrun puts on OpenMPI's mpirun command line itself (horovod.runner.mpi_run, 0.16 to 0.28), and
# the TCP interface it picks itself (from --network-interface, else the interfaces common to the hosts).
HOROVODRUN_MCA = {"pml": "ob1", "btl": "^openib"}
HOROVODRUN_OWN_MCA = {*HOROVODRUN_MCA, "btl_tcp_if_include", "btl_tcp_if_exclude"}


@LAUNCHERS.register("horovodrun")
class HorovodrunLauncher(Launcher):
    tool = Tool("horovodrun", "Horovod (make horovod, or an image with Horovod)")
    rank_env_names = OMPI_RANK_ENV
    rank_env_prefixes = OMPI_RANK_PREFIXES
    host_mpi = True        # it runs the host's mpirun
    ranks_load_mpi = True  # Horovod ranks load the image's MPI
    inherited_job_markers = OMPI_JOB_MARKERS  # the mpirun it runs
    horovod_ranks = True   # so the PyTorch harness distributes with Horovod (--dist horovod)

    def rank_failure(self, text: str) -> RankFailure | None:
        return open_mpi_rank_failure(text)  # mpirun's own report, in horovodrun's output

    def check(self, plan: Plan, scheduler: SchedulerView) -> None:
        super().check(plan, scheduler)
        mca = fabric_for(plan).mca
        clash = [f"{key} {mca[key]}" for key, value in HOROVODRUN_MCA.items() if mca.get(key, value) != value]
        if clash:
            raise UsageError(f"launcher horovodrun always runs OpenMPI with -mca pml ob1 -mca btl ^openib, but "
                             f"fabric {plan.fabric} needs -mca {', '.join(clash)}; valid: --launcher mpirun "
                             "(Horovod ranks too), or --fabric tcp")

    def wrap(self, plan: Plan, rank: RankCommand, scheduler: SchedulerView) -> Launch:
        require_no_launcher_args(self.name, rank)
        hosts, setup = mpirun_hosts(scheduler, plan.ranks_per_node)
        mca = fabric_for(plan).mca
        # dlrun's own words only: horovodrun pastes this string into the mpirun command line it runs.
        mpi_args = " ".join(["--bind-to none --map-by slot",
                             *(f"-mca {k} {v}" for k, v in mca.items() if k not in HOROVODRUN_OWN_MCA)])
        argv = ["horovodrun", "-np", str(plan.world_size)]
        if hosts:
            argv += ["-H", hosts]
        argv += ["--mpi", "--mpi-args", mpi_args, "--output-filename", Expand("${" + RUN_DIR_VAR + "}/logs")]
        tcp = plan.system.fabric_config.get("tcp")
        # On one node horovodrun wants the interface that holds 127.0.0.1 and refuses any other it is given.
        if plan.fabric == "tcp" and tcp and tcp.interfaces and plan.nodes > 1:
            argv += ["--network-interface", ",".join(tcp.interfaces)]
        argv += list(plan.launcher_args) + gpu_affinity_argv(plan) + rank.argv
        return Launch(argv=argv, env={**rank.env, **root_ok(plan)}, rank_log_pattern="logs/1/rank.{rank}/stdout",
                      setup=setup)
