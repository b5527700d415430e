"""Container runtimes wrap one rank's command so that it runs in the plan's image (binds, devices, env, GPUs).

`Runtime` is the base of every runtime; `ContainerRuntime` is the base of those that need a container image
(all but `host`), and refuses the host's own Python with one line.
"""
from __future__ import annotations

from dlrun.errors import UsageError
from dlrun.job import RankCommand
from dlrun.plan import Plan
from dlrun.registry import Tool


class Runtime:
    #: The program this runtime runs on the compute node (None: nothing beyond the rank command).
    tool: Tool | None = None
    #: Characters this runtime's bind syntax cannot carry in a path (the run directory is bound too).
    bind_forbidden = ""

    def __init__(self, name: str):
        self.name = name

    def check(self, plan: Plan) -> None:
        """Raise UsageError when this runtime cannot run the plan (e.g. it needs another launcher)."""

    def wrap(self, plan: Plan, rank: RankCommand) -> RankCommand:
        raise NotImplementedError


class ContainerRuntime(Runtime):
    """A runtime that starts the plan's container image."""

    bind_forbidden = ":"

    def check(self, plan: Plan) -> None:
        if plan.image.kind == "host":
            raise UsageError(f"runtime {self.name} needs a container image, but image {plan.image.name!r} is the "
                             "host's own Python; valid: --runtime host, or a container image (dlrun images list)")
        for bind in plan.mounts:
            for path in (bind.source, bind.target):
                if any(ch in path for ch in self.bind_forbidden):
                    chars = [repr(ch) for ch in self.bind_forbidden]
                    raise UsageError(f"bind path {path!r} contains {' or '.join(chars)}, which runtime {self.name} "
                                     f"cannot bind; valid: a path without {' and '.join(chars)}")


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
