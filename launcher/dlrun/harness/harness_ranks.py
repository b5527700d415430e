"""dlrun harness: which rank of how many this process is, read from the
variables its launcher set.  Shared by every framework's harness; standard
library only, runs on Python >= 3.6.
"""

import os

from harness_common import EXIT_WORLD_SIZE, HarnessError
from harness_contract import RANK_SOURCES


def _env_int(environ, key, source):
    value = environ.get(key)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise HarnessError("bad %s=%r in the environment (%s)"
                           % (key, value, source))


def detect_rank_env(environ=None):
    """(rank, world_size, local_rank or None, source) from the launcher's
    environment (harness_contract.RANK_SOURCES, first match), else one process:
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
