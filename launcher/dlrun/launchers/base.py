"""Launchers start the ranks. Each is given the plan, the (runtime-wrapped) rank command and the scheduler
object it runs under; it asks the scheduler what it needs (the allocation's hosts, whether it has a step
launcher of its own, how to start one process per node) instead of branching on the scheduler's name.

What a launcher may ask of its scheduler is the `SchedulerView` protocol below, which
`dlrun.schedulers.base.Scheduler` provides. Launchers never import schedulers (schedulers call launchers'
functions: PBS starts one process per node with mpiexec), so the two packages depend on each other one way.

A launcher also says what the checks and the executor need to know about it, as attributes and methods:
whether it is the host MPI's own launcher, whether its ranks load MPI, whether it can start an MPI program,
the PMI it gives the ranks, where its ranks' output goes, and how it reports a failed rank.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel

from dlrun.errors import UsageError
from dlrun.harness.harness_contract import local_rank_variables, shell_first_set
from dlrun.job import Launch, RankCommand, RankFailure
from dlrun.nodemodel import node_model, rank_affinity
from dlrun.plan import Plan, fabric_for
from dlrun.registry import SCHEDULERS, Tool

__all__ = ["Launch", "Launcher", "PmiRequest", "SchedulerView"]


class SchedulerView(Protocol):
    """What a launcher asks of the scheduler it runs under."""

    name: str
    #: Jobs are submitted and run elsewhere (the allocation's hosts come from the job's environment).
    batch: bool
    #: The scheduler starts the image itself (Kubernetes pods); no launcher of the host starts ranks.
    runs_image: bool
    #: The scheduler writes mpirun's hostfile itself (the Kubernetes MPI operator).
    writes_hostfile: bool
    #: Launchers that belong to this scheduler (srun to Slurm, jsrun to LSF/CSM).
    step_launchers: tuple[str, ...]
    #: How this site's MPI launcher is spelled in jobs of this scheduler.
    mpirun_command: str

    def node_list_shell(self) -> str: ...

    def per_node_launch(self, plan: Plan, rank: RankCommand) -> Launch: ...

    def options_for(self, plan: Plan) -> BaseModel: ...


@dataclass(frozen=True)
class PmiRequest:
    """The PMI a launcher starts the ranks with (the ranks' MPI must support it)."""

    plugin: str   #: as the launcher is told it: pmix, pmix_v3, pmi2
    shown: str    #: as the job shows it: `srun --mpi=pmix_v3`
    setting: str  #: where a site changes it: `scheduler_options.srun_mpi`

    @property
    def family(self) -> str:
        """pmix for every PMIx version, else the plugin."""
        return "pmix" if self.plugin.startswith("pmix") else self.plugin


class Launcher:
    #: The program this launcher runs on the submitting (or first compute) node.
    tool: Tool | None = None
    #: Variables this launcher sets per rank on the host; containers must inherit them (RankCommand.passthrough).
    rank_env_names: tuple[str, ...] = ()
    rank_env_prefixes: tuple[str, ...] = ()
    #: The host MPI's own launcher (or a tool that runs it): ranks that load the image's MPI must match the
    #: host's MPI in family and release series.
    host_mpi = False
    #: Its ranks load an MPI library themselves (Horovod), whatever the workload.
    ranks_load_mpi = False
    #: It starts the processes of one MPI job (nccl-tests, built with MPI=1): started any other way, every
    #: process would be a one-rank job of its own.
    starts_mpi_programs = False
    #: Its ranks are Horovod's own (horovodrun): the PyTorch harness must distribute with Horovod.
    horovod_ranks = False
    #: It binds each rank's cores itself, on its GPU's socket (jsrun's resource sets), instead of dlrun's
    #: affinity wrapper (dlrun.jobcheck's gpu-socket rule reads it).
    binds_resource_sets = False
    #: The ranks' output reaches the job's own output. False: it goes to per-rank files only (srun
    #: --output), and the executor follows rank 0's file.
    rank_output_in_job_log = True
    #: Variables its program's own processes carry (name, why): found in dlrun's environment, they mean dlrun
    #: was started from inside a job of that program, and the program started from here would take itself for
    #: part of that job.
    inherited_job_markers: tuple[tuple[str, str], ...] = ()

    def __init__(self, name: str):
        self.name = name

    def pmi_request(self, plan: Plan, scheduler: SchedulerView) -> PmiRequest | None:
        """The PMI this launcher gives the ranks, or None when it wires up no MPI through a PMI."""
        return None

    def rank_failure(self, text: str) -> RankFailure | None:
        """The first failed rank this launcher reported in a job's output `text` (its messages as its users
        published them), or None."""
        return None

    def supports(self, scheduler: SchedulerView) -> bool:
        """Whether this launcher can start ranks in an allocation of `scheduler`."""
        return not scheduler.runs_image

    def check(self, plan: Plan, scheduler: SchedulerView) -> None:
        """Raise UsageError when this launcher cannot start the plan's ranks (wrong scheduler, old image)."""
        if not self.supports(scheduler):
            raise UsageError(f"launcher {self.name} needs scheduler {' or '.join(self.schedulers())}, but the plan "
                             f"uses {scheduler.name}; valid: --scheduler {self.schedulers()[0]}, or another --launcher")

    def schedulers(self) -> list[str]:
        """The schedulers this launcher works under (for messages)."""
        return [name for name, sched in SCHEDULERS.available().items() if self.supports(sched)]

    def prepare(self, plan: Plan, rank: RankCommand) -> RankCommand:
        """Change the in-container command before the runtime wraps it (torchrun runs inside the image)."""
        return rank

    def wrap(self, plan: Plan, rank: RankCommand, scheduler: SchedulerView) -> Launch:
        raise NotImplementedError


# Runs on the host (or in the container under pyxis/torchrun) in front of each rank: one GPU per rank from
# the local rank, and CPU binding to that GPU's NUMA node when the system profile knows it (dlrun.nodemodel). Constant text:
# only the NUMA map (integers from the validated profile) is filled in, and whether the rank is given its GPU alone.
AFFINITY_SCRIPT = (
    f"lr={shell_first_set(local_rank_variables())}; "
    'IFS=, read -r -a gpus <<< "${CUDA_VISIBLE_DEVICES:-}"; '
    'if [ "${#gpus[@]}" -gt 0 ]; then gpu=${gpus[lr % ${#gpus[@]}]}; else gpu=$lr; fi; '
    '@ONE_GPU@'
    "numa=(@NUMA@); node=\"\"; "
    'case "$gpu" in (*[!0-9]*) ;; (*) node=${numa[gpu]:-} ;; esac; '
    'if [ -n "$node" ] && command -v taskset >/dev/null '
    '&& cpus=$(cat "/sys/devices/system/node/node${node}/cpulist" 2>/dev/null); '
    'then exec taskset -c "$cpus" "$@"; fi; '
    'exec "$@"'
)
ONE_GPU = 'export CUDA_VISIBLE_DEVICES="$gpu"; '
AFFINITY_ARG0 = "dlrun-rank"


def numa_map(plan: Plan) -> list[int] | None:
    """The GPU -> NUMA node map the plan's ranks are bound by (dlrun.nodemodel.binding.rank_affinity)."""
    found = rank_affinity(node_model(plan.system), plan.fabric, plan.device, plan.dist)
    return list(found.numa) if found else None


def gpu_affinity_argv(plan: Plan) -> list[str]:
    """`bash -c AFFINITY dlrun-rank` for GPU plans (one rank per GPU); nothing on CPU nor for a --dist
    dataparallel process (all of its node's GPUs, on every socket). nccl-tests chooses its GPU itself (device =
    its local rank among the MPI processes of its host) and fails when it sees one GPU only: its ranks keep
    every GPU visible and are bound to the NUMA node of the GPU their local rank takes."""
    if plan.device != "cuda" or plan.dist == "dataparallel":
        return []
    numa = numa_map(plan) or []
    one_gpu = "" if plan.workload.kind == "nccl-tests" else ONE_GPU
    if not numa and not one_gpu:
        return []
    script = AFFINITY_SCRIPT.replace("@ONE_GPU@", one_gpu).replace("@NUMA@", " ".join(str(int(n)) for n in numa))
    return ["bash", "-c", script, AFFINITY_ARG0]


def hosts_setup(scheduler: SchedulerView, slots: int) -> list[str]:
    """Shell lines that set DLRUN_HOSTS to `host:slots,...` from the scheduler's allocation."""
    return [f"DLRUN_HOSTS=$({scheduler.node_list_shell()} | sed 's/$/:{int(slots)}/' | paste -sd, -)"]


def mca_env(plan: Plan) -> dict[str, str]:
    """The fabric's OpenMPI settings as environment, for MPI inside ranks that the scheduler starts."""
    return {f"OMPI_MCA_{key}": value for key, value in fabric_for(plan).mca.items()}


def require_no_launcher_args(launcher: str, rank: RankCommand) -> None:
    if rank.launcher_args:
        raise UsageError(f"launcher {launcher} cannot take the runtime's launcher flags {list(rank.launcher_args)}; "
                         "valid: --launcher srun")
