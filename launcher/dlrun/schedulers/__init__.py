"""Schedulers: turn a launch into a submission (script + how to start it) and know how to wait."""
from dlrun.registry import Registry
from dlrun.schedulers.base import Scheduler

SCHEDULERS: Registry[Scheduler] = Registry("scheduler")

from dlrun.schedulers import local  # noqa: E402,F401  (registers)

__all__ = ["SCHEDULERS", "Scheduler"]
