from __future__ import annotations

from dlrun.plan import Plan
from dlrun.render import RankCommand


class Runtime:
    """Wraps one rank's command so that it runs in the plan's image (binds, devices, env, GPUs)."""

    def __init__(self, name: str):
        self.name = name

    def check(self, plan: Plan) -> None:
        """Raise UsageError when this runtime cannot run the plan (e.g. it needs another launcher)."""

    def wrap(self, plan: Plan, rank: RankCommand) -> RankCommand:
        raise NotImplementedError


def image_reference(plan: Plan) -> str:
    """`uri@digest` when the digest is pinned, else the uri; the catalog name when the image has no uri."""
    image = plan.image
    uri = image.uri or image.name
    if image.digest and "@" not in uri:
        return f"{uri}@{image.digest}"
    return uri
