from __future__ import annotations

from dlrun.launchers.base import Launch
from dlrun.plan import Plan
from dlrun.render import RenderedJob


class Scheduler:
    def __init__(self, name: str):
        self.name = name

    def render(self, plan: Plan, launch: Launch) -> RenderedJob:
        raise NotImplementedError
