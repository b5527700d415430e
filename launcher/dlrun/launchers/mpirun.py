"""`mpirun` (OpenMPI), hybrid model: the host's mpirun starts one (containerized) process per rank.

`-np`, `-H host:slots`, `--bind-to none --map-by slot` (binding is done per rank to the GPU's NUMA node),
`-mca` settings of the fabric (ob1/tcp, UCX for ib/roce, PSM2 through OFI for opa), and `-x` for each
variable so that every rank on every node sees it. The scheduler names the program (PBS sites spell it
`mpiexec`) and says where the hosts come from.

A failed rank is read from mpirun's own report of it, as its users published it
(tests/data/logs/launcher-failures); mpirun wraps its messages at 80 columns, so whitespace runs are folded.
"""
from __future__ import annotations

import re

from dlrun.job import RUN_DIR_VAR, Launch, RankCommand, RankFailure
from dlrun.launchers.base import Launcher, SchedulerView, gpu_affinity_argv, hosts_setup, require_no_launcher_args
from dlrun.plan import Plan, fabric_for
from dlrun.registry import LAUNCHERS, Tool
from dlrun.shell import Expand

# OpenMPI refuses to run as root unless told: said only in a job that runs as root (Plan.runs_as_root), where a
# site's job would otherwise carry a root-only switch for every user.
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def root_ok(plan: Plan) -> dict[str, str]:
    """ROOT_OK where the job's mpirun runs as root, else nothing."""
    return dict(ROOT_OK) if plan.runs_as_root else {}
OMPI_RANK_ENV = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_NODE_RANK", "OMPI_UNIVERSE_SIZE",
                 "CUDA_VISIBLE_DEVICES")
OMPI_RANK_PREFIXES = ("OMPI_", "PMIX_", "OPAL_")
# Open MPI's runtime sets these in every process of its jobs; an mpirun whose environment has them takes itself
# for part of that job. Open MPI 4.1: with OMPI_MCA_ess=singleton (left by a process that initialised MPI
# without mpirun, e.g. one that imported mpi4py) `mpirun -n 1 true` exits 1 printing nothing; inside an
# mpirun's rank (OMPI_COMM_WORLD_RANK, OMPI_MCA_ess=^singleton) it refuses "recursive calls".
OMPI_JOB_MARKERS = (
    ("OMPI_MCA_ess", "left by a process that initialised MPI, e.g. through mpi4py, or by an mpirun rank"),
    ("OMPI_COMM_WORLD_RANK", "set in the ranks mpirun starts"))
MPIRUN_TOOL = Tool("mpirun", "OpenMPI (Debian: apt-get install openmpi-bin; HPC sites: module load openmpi)")
OMPI_SIGNAL = re.compile(r"\b(?P<tool>mpirun|mpiexec|orterun|prterun) noticed that process rank (?P<rank>\d+) with "
                         r"PID \d+ on node (?P<host>\S+) exited on signal (?P<signal>\d+)")
OMPI_EXIT = re.compile(r"\b(?P<tool>mpirun|mpiexec|orterun|prterun) detected that one or more processes exited with "
                       r"non-zero status.{0,400}?Process name: \[\[\d+,\d+\],(?P<rank>\d+)\](?: Local host: (?P<host>\S+))?"
                       r" Exit code: (?P<code>-?\d+)")


def open_mpi_rank_failure(text: str) -> RankFailure | None:
    """The first failed rank Open MPI's launcher (mpirun, mpiexec, orterun, prterun) reported in `text`."""
    flat = " ".join(text.split())
    match = OMPI_SIGNAL.search(flat)
    if match:
        return RankFailure(match.group("tool"), int(match.group("rank")), match.group("host"),
                           signal=int(match.group("signal")))
    match = OMPI_EXIT.search(flat)
    if match:
        return RankFailure(match.group("tool"), int(match.group("rank")), match.group("host"),
                           exit_code=int(match.group("code")))
    return None


def mpirun_hosts(scheduler: SchedulerView, slots: int) -> tuple[str | None, list[str]]:
    """(-H value, setup lines): literal on one local node, from the allocation under a batch scheduler,
    none where the scheduler writes mpirun's hostfile itself (the Kubernetes MPI operator)."""
    if scheduler.writes_hostfile:
        return None, []
    if not scheduler.batch:
        return f"localhost:{slots}", []
    return Expand("${DLRUN_HOSTS}"), hosts_setup(scheduler, slots)


def mpirun_argv(plan: Plan, scheduler: SchedulerView, env_names: list[str], hosts: str | None, *,
                np: int | None = None) -> list[str]:
    argv = [scheduler.mpirun_command, "-np", str(np or plan.world_size)]
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
    tool = MPIRUN_TOOL
    rank_env_names = OMPI_RANK_ENV
    rank_env_prefixes = OMPI_RANK_PREFIXES
    host_mpi = True
    starts_mpi_programs = True
    inherited_job_markers = OMPI_JOB_MARKERS

    def rank_failure(self, text: str) -> RankFailure | None:
        return open_mpi_rank_failure(text)

    def supports(self, scheduler: SchedulerView) -> bool:
        return True

    def wrap(self, plan: Plan, rank: RankCommand, scheduler: SchedulerView) -> Launch:
        require_no_launcher_args(self.name, rank)
        hosts, setup = mpirun_hosts(scheduler, plan.ranks_per_node)
        argv = mpirun_argv(plan, scheduler, sorted(rank.env), hosts) + list(plan.launcher_args)
        argv += gpu_affinity_argv(plan) + rank.argv
        return Launch(argv=argv, env={**rank.env, **root_ok(plan)}, rank_log_pattern="logs/1/rank.{rank}/stdout",
                      setup=setup)
