"""`charliecloud`: `ch-run` on the image's unpacked root filesystem (no daemon, no privileges).

- The image's own environment comes from `/ch/environment` (`--set-env`), then dlrun's rank variables
  are set explicitly (`--set-env=NAME=VALUE`, already expanded by the job script, hence
  `--env-no-expand`). Everything else, including the launcher's per-rank variables (OMPI_*, PMIX_*,
  SLURM_*), is inherited from the host, which is how ch-run works; host Python and loader paths that
  would shadow the image's are unset first.
- Binds: `-b SRC:DST`; the target must exist in the image (dlrun's images create /data). ch-run binds
  are read-write, so a read-only bind is remounted read-only inside the container: that takes `-u 0`
  (the caller, mapped to root in its own user namespace; no privilege beyond the caller's own).
- Devices: ch-run binds the host's /dev as it is, so fabric devices need nothing.
- ch-run needs $USER, which batch jobs and containers do not always set.
"""
from __future__ import annotations

import shlex

from dlrun.errors import UsageError
from dlrun.job import RankCommand
from dlrun.plan import Plan
from dlrun.registry import RUNTIMES, Tool
from dlrun.runtimes.base import ContainerRuntime, ImageCopy, NodeReference
from dlrun.shell import Expand, SecretRef

HOST_ONLY_ENV = ("PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH", "LD_PRELOAD", "VIRTUAL_ENV")


def remount_read_only(targets: list[str], argv: list[str]) -> list[str]:
    script = " && ".join(f"mount -o remount,bind,ro {shlex.quote(t)}" for t in targets) + ' && exec "$@"'
    return ["/bin/sh", "-c", script, "dlrun-ro-binds", *argv]


@RUNTIMES.register("charliecloud")
class CharliecloudRuntime(ContainerRuntime):
    tool = Tool("ch-run", "Charliecloud (Debian: apt-get install charliecloud)")

    def image_copy(self, plan: Plan) -> ImageCopy:
        """The unpacked root filesystem in the image store of the node that runs the job."""
        return ImageCopy("rootfs", what="unpacked root filesystem", path=plan.image.rootfs, tool=self.tool,
                         how=f"dlrun images build {plan.image.name} --engine {self.name}")

    def node_reference(self, plan: Plan) -> NodeReference:
        return NodeReference(plan.image.rootfs or "", "file")

    def wrap(self, plan: Plan, rank: RankCommand) -> RankCommand:
        rootfs = plan.image.rootfs
        if not rootfs:
            raise UsageError(f"image {plan.image.name!r} has no unpacked root filesystem on this machine; build or "
                             f"load it: dlrun images build {plan.image.name} --engine charliecloud")
        env = {**rank.env, "USER": Expand("${USER:-$(id -un)}")}
        argv = ["ch-run", "--env-no-expand"] + [f"--unset-env={name}" for name in HOST_ONLY_ENV] + ["--set-env"]
        for name, value in sorted(env.items()):
            if isinstance(value, SecretRef):
                continue  # inherited from the host like every other variable; never on a command line
            argv.append(Expand(f"--set-env={name}={value}") if isinstance(value, Expand) else f"--set-env={name}={value}")
        read_only = []
        for bind in plan.mounts:
            argv += ["-b", f"{bind.source}:{bind.target}"]
            if bind.read_only:
                read_only.append(bind.target)
        command = list(rank.argv)
        if read_only:
            argv += ["-u", "0", "-g", "0"]
            command = remount_read_only(read_only, command)
        argv += [rootfs, "--", *command]
        return rank.with_argv(argv, env=env)
