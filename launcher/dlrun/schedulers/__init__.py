"""Schedulers: turn a launch into a submission (script + how to start it) and know how to wait."""
from dlrun.registry import Registry
from dlrun.schedulers.base import JobState, Scheduler

SCHEDULERS: Registry[Scheduler] = Registry("scheduler")

from dlrun.schedulers import kubernetes, local, lsf, pbs, slurm  # noqa: E402,F401  (registers)

__all__ = ["SCHEDULERS", "JobState", "Scheduler"]
