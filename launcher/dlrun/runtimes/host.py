"""`host`: no container; the rank command runs as it is.

With no container nothing is mounted, so a bind (`--data DIR` is a bind at /data) cannot put a host directory
at its target: the workload is given the host path instead, wherever its command or environment names the
target (`--data_dir=/data` becomes `--data_dir=/datasets/imagenet`). The pre-launch checks say so.
"""
from __future__ import annotations

from dlrun.job import RankCommand
from dlrun.plan import Plan
from dlrun.registry import RUNTIMES
from dlrun.runtimes.base import Runtime
from dlrun.shell import Expand


def host_path(word: str, targets: list[tuple[str, str]]) -> str:
    """`word` with a bind target (alone, or as the value of `--opt=TARGET`) replaced by the bind's source."""
    if isinstance(word, Expand):  # dlrun's own shell words name no bind target
        return word
    prefix, sep, value = word.rpartition("=")
    for target, source in targets:
        if not target.strip("/"):
            continue
        if value == target or value.startswith(target.rstrip("/") + "/"):
            return prefix + sep + source + value[len(target.rstrip("/")):]
    return word


@RUNTIMES.register("host")
class HostRuntime(Runtime):
    def wrap(self, plan: Plan, rank: RankCommand) -> RankCommand:
        if not plan.mounts:
            return rank
        # Longest target first, so that /data/x is mapped by a bind at /data/x rather than one at /data.
        targets = sorted(((b.target, b.source) for b in plan.mounts), key=lambda t: len(t[0]), reverse=True)
        env = {name: host_path(value, targets) for name, value in rank.env.items()}
        return rank.with_argv([host_path(word, targets) for word in rank.argv], env=env)
