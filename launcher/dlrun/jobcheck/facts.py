"""What a rendered job does, as data the rules read: where each local rank is bound and how many threads it
runs, the ranks' environment (fabric, GPUDirect), whether locked memory is raised inside the container, what
the compute nodes resolve to start the image, who the job runs as, and the image's CUDA.

Built by dlrun.render from the plan, the launch it rendered and the backends' own declarations (a launcher's
binding, a runtime's node reference), not from the script text; tests hold the facts to the text."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from dlrun.launchers.base import AFFINITY_ARG0
from dlrun.nodemodel import NodeModel, node_model
from dlrun.plan import Plan

#: The argv[0] of the in-container prelude that raises the locked-memory limit (dlrun.render.memlock_argv).
MEMLOCK_ARG0 = "dlrun-memlock"
#: Open MPI's switches for running as root: only in a job that runs as root.
ROOT_ONLY_VARS = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")


@dataclass(frozen=True)
class ImageFacts:
    name: str
    kind: str                      #: host | container
    cuda: str | None               #: the image's CUDA; None: none (CPU image) or not known
    cuda_known: bool               #: False where the image describes no stack (the host's Python, a site's image)
    forward_compat: tuple[str, ...] = ()
    nccl: str | None = None
    nccl_present: bool = True      #: False where the image's stack says it has no NCCL
    psm2_cuda: bool | None = None  #: None: the image does not say


@dataclass(frozen=True)
class JobFacts:
    system: str
    node: NodeModel
    device: str
    fabric: str
    rdma: bool
    ranks_per_node: int
    threads: int                         #: CPU threads each process runs (OMP_NUM_THREADS, TensorFlow's pool)
    bound: tuple[int | None, ...]        #: NUMA node each local rank is bound to (None: not bound)
    bound_by: str                        #: dlrun (the affinity wrapper) | launcher (jsrun) | none
    bound_to: str                        #: gpu: each GPU's NUMA node; nic: the fabric NIC's (GPUs' unknown)
    one_process_all_gpus: bool           #: one process per node drives all of its GPUs (dataparallel, TF local)
    env: Mapping[str, str]               #: what the ranks see (the job's exports and the rank environment)
    memlock_raised: bool                 #: the in-container prelude raises locked memory to unlimited
    reference: str                       #: what the compute nodes resolve to start the image
    reference_kind: str                  #: registry | file | engine | none
    runs_elsewhere: bool                 #: a batch or Kubernetes job: compute nodes other than this machine
    whole_nodes: bool                    #: the job asks for its nodes exclusively (every CPU in its allocation)
    runs_as_root: bool
    root_vars: tuple[str, ...]           #: root-only switches the job sets
    loads_mpi: bool                      #: the ranks initialise an MPI library (Horovod, nccl-tests, TF stacks)
    joins_launcher_session: bool         #: the runtime lets such a rank reach its host launcher's PMIx server
    image: ImageFacts = field(default_factory=lambda: ImageFacts("", "host", None, False))


def image_facts(plan: Plan) -> ImageFacts:
    image = plan.image
    cuda = getattr(image, "cuda", None)
    nccl = getattr(image, "nccl", None)
    mpi = getattr(image, "mpi", None)
    compat = getattr(cuda, "forward_compat", None)
    return ImageFacts(name=image.name, kind=image.kind, cuda=getattr(cuda, "version", None),
                      cuda_known=cuda is not None, forward_compat=tuple(compat.drivers) if compat else (),
                      nccl=getattr(nccl, "version", None),
                      nccl_present=nccl is None or getattr(nccl, "version", None) is not None,
                      psm2_cuda=getattr(mpi, "psm2_cuda", None) if mpi is not None else None)


def thread_count(env: Mapping[str, str], argv: list[str]) -> int:
    """The threads a rank runs: OMP_NUM_THREADS, or TensorFlow's intra-op pool where the command sets it."""
    counts = [int(value) for value in (env.get("OMP_NUM_THREADS", ""),) if str(value).isdigit()]
    counts += [int(word.split("=", 1)[1]) for word in argv
               if str(word).startswith("--num_intra_threads=") and str(word).split("=", 1)[1].isdigit()]
    return max(counts or [1])


def bound_ranks(plan: Plan, launch_argv: list[str], numa: list[int] | None, launcher_binds: bool) -> tuple:
    """(NUMA node per local rank, by whom): the affinity wrapper's map where it is in the launch, the GPU's
    socket where the launcher binds resource sets to it (jsrun), else nothing."""
    ranks = plan.ranks_per_node
    gpu_numa = node_model(plan.system).gpu_numa
    if AFFINITY_ARG0 in launch_argv and numa:
        return tuple(numa[lr % len(numa)] for lr in range(ranks)), "dlrun"
    if launcher_binds and plan.device == "cuda" and gpu_numa and None not in gpu_numa:
        return tuple(gpu_numa[lr % len(gpu_numa)] for lr in range(ranks)), "launcher"
    return (None,) * ranks, "none"
