"""Who the job's processes run as: what root-only settings (Open MPI's OMPI_ALLOW_RUN_AS_ROOT) depend on.

A local job runs as the user who starts dlrun, and so does a batch job (Slurm, PBS and LSF run a job as the
user who submitted it); a Kubernetes pod runs as its image's user, root in dlrun's images."""
from __future__ import annotations

import os

from dlrun.registry import SCHEDULERS


def effective_uid() -> int:
    """This process's user (tests of rendered text set one, so that the text does not depend on who runs them)."""
    return os.geteuid()


def runs_as_root(scheduler: str) -> bool:
    return SCHEDULERS.get(scheduler).runs_image or effective_uid() == 0
