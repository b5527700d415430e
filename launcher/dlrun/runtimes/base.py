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
    """What a runtime pulls: the registry digest reference when the image was pushed or pulled
    (`repo@sha256:...`, immutable), else `uri:<arch>` (one tag per architecture), else the uri as written
    when it already carries a tag, else the catalog name."""
    image = plan.image
    repo_digest = getattr(image, "repo_digest", None)
    if repo_digest:
        return repo_digest
    uri = image.uri or image.name
    last = uri.rsplit("/", 1)[-1]
    if image.uri and ":" not in last and "@" not in last:
        return f"{uri}:{plan.system.arch}"
    return uri
