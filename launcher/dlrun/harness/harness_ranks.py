"""dlrun harness: which rank of how many this process is, read from the
variables its launcher set.  Shared by every framework's harness; standard
library only, runs on Python >= 3.6.
"""

import os

from harness_common import EXIT_WORLD_SIZE, HarnessError

# (source, rank variable, size variable, local-rank variables): the first
# row whose rank and size variables are both set wins; the local rank is the
# first of its variables that is set (None when none is).
RANK_SOURCES = (
    # torchrun, and jsrun through dlrun's wrapper (JSM_* handed on as these)
    ("torchrun", "RANK", "WORLD_SIZE", ("LOCAL_RANK",)),
    # Open MPI's mpirun (and horovodrun over it)
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     ("OMPI_COMM_WORLD_LOCAL_RANK",)),
    # horovodrun with its gloo controller (no MPI)
    ("horovod", "HOROVOD_RANK", "HOROVOD_SIZE", ("HOROVOD_LOCAL_RANK",)),
    # a PMIx server: Open MPI's, or Slurm's srun --mpi=pmix
    ("pmix", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE",
     ("OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")),
    ("pmix", "PMIX_RANK", "SLURM_NTASKS",
     ("OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")),
    # MPICH's Hydra (and Intel MPI, MVAPICH2): the PMI-1/PMI-2 variables
    ("mpich", "PMI_RANK", "PMI_SIZE", ("MPI_LOCALRANKID",)),
    # IBM's jsrun started directly
    ("jsrun", "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE",
     ("JSM_NAMESPACE_LOCAL_RANK",)),
    # Slurm's srun
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS", ("SLURM_LOCALID",)),
)


def _env_int(environ, key, source):
    value = environ.get(key)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise HarnessError("bad %s=%r in the environment (%s)"
                           % (key, value, source))


def detect_rank_env(environ=None):
    """(rank, world_size, local_rank or None, source) from the launcher's
    environment (RANK_SOURCES, first match), else one process:
    (0, 1, 0, "single")."""
    env = os.environ if environ is None else environ
    for source, rank_key, size_key, local_keys in RANK_SOURCES:
        if rank_key not in env or size_key not in env:
            continue
        rank = _env_int(env, rank_key, source)
        size = _env_int(env, size_key, source)
        local = None
        for key in local_keys:
            if key in env:
                local = _env_int(env, key, source)
                break
        if size < 1 or rank < 0 or rank >= size:
            raise HarnessError("inconsistent rank %d / world size %d (%s)"
                               % (rank, size, source))
        return rank, size, local, source
    return 0, 1, 0, "single"


def check_world_size(expected, world_size, rank, source):
    """Stop with EXIT_WORLD_SIZE when the launcher started another number of
    processes than the plan asked for (`expected` None: nothing asked)."""
    if expected is not None and expected != world_size:
        raise HarnessError(
            "expected world size %d but found %d (rank %d, rank source: "
            "%s); check the launcher's process count"
            % (expected, world_size, rank, source), EXIT_WORLD_SIZE)
