"""`mpirun` (OpenMPI), hybrid model: the host's mpirun starts one (containerized) process per rank.

`-np`, `-H host:slots`, `--bind-to none --map-by slot` (binding is done per rank to the GPU's NUMA node),
`-mca` settings of the fabric (ob1/tcp, UCX for ib/roce, PSM2 through OFI for opa), and `-x` for each
variable so that every rank on every node sees it. Under PBS it is spelled `mpiexec`, as PBS sites do.
"""
from __future__ import annotations

from dlrun.registry import LAUNCHERS
from dlrun.launchers.base import (Launch, Launcher, gpu_affinity_argv, hosts_setup, require_no_launcher_args,
                                  require_scheduler)
from dlrun.plan import Plan
from dlrun.render import RUN_DIR_VAR, Expand, RankCommand, fabric_for

# OpenMPI refuses to run as root unless told; harmless for other users.
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
OMPI_RANK_ENV = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_NODE_RANK", "OMPI_UNIVERSE_SIZE",
                 "CUDA_VISIBLE_DEVICES")
OMPI_RANK_PREFIXES = ("OMPI_", "PMIX_", "OPAL_")


def mpirun_hosts(plan: Plan, slots: int) -> tuple[str | None, list[str]]:
    """(-H value, setup lines): literal on one local node, from the allocation under a batch scheduler,
    none under Kubernetes (the MPI operator writes the hostfile)."""
    if plan.scheduler == "kubernetes":
        return None, []
    if plan.scheduler == "local":
        return f"localhost:{slots}", []
    return Expand("${DLRUN_HOSTS}"), hosts_setup(plan, slots)


def mpirun_argv(plan: Plan, env_names: list[str], hosts: str | None, *, np: int | None = None) -> list[str]:
    argv = ["mpiexec" if plan.scheduler == "pbs" else "mpirun", "-np", str(np or plan.world_size)]
    if hosts:
        argv += ["-H", hosts]
    argv += ["--bind-to", "none", "--map-by", "slot"]
    # Per-rank stdout/stderr files (OpenMPI >= 3: DIR/1/rank.N/{stdout,stderr}); also still shown live.
    argv += ["--output-filename", Expand("${" + RUN_DIR_VAR + "}/logs")]
    for key, value in fabric_for(plan).mca.items():
        argv += ["-mca", key, value]
    for name in env_names:
        argv += ["-x", name]
    return argv


@LAUNCHERS.register("mpirun")
class MpirunLauncher(Launcher):
    rank_env_names = OMPI_RANK_ENV
    rank_env_prefixes = OMPI_RANK_PREFIXES

    def check(self, plan: Plan) -> None:
        require_scheduler(self.name, plan, ("local", "slurm", "pbs", "lsf", "kubernetes"))
        if plan.scheduler == "local" and plan.nodes > 1:
            from dlrun.errors import UsageError

            raise UsageError(f"--nodes {plan.nodes} with scheduler local: a local run has one node; "
                             "valid: --nodes 1, or a batch scheduler (slurm, pbs, lsf)")

    def wrap(self, plan: Plan, rank: RankCommand) -> Launch:
        require_no_launcher_args(self.name, rank)
        hosts, setup = mpirun_hosts(plan, plan.ranks_per_node)
        argv = mpirun_argv(plan, sorted(rank.env), hosts) + list(plan.launcher_args)
        argv += gpu_affinity_argv(plan) + rank.argv
        return Launch(argv=argv, env={**rank.env, **ROOT_OK}, rank_log_pattern="logs/1/rank.{rank}/stdout",
                      setup=setup)
