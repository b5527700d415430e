"""`enroot` through the pyxis SPANK plugin: srun itself starts each rank in the container
(`srun --container-image --container-mounts --container-name`), so this runtime adds flags to srun and
leaves the rank command as it is. pyxis passes the task environment into the container."""
from __future__ import annotations

import re

from dlrun.errors import UsageError
from dlrun.job import RankCommand
from dlrun.plan import Plan
from dlrun.registry import RUNTIMES, Tool
from dlrun.runtimes.base import ContainerRuntime, ImageCopy, NodeReference, image_reference
from dlrun.runtimes.singularity import bind_spec
from dlrun.shell import Concat, Expand


def pyxis_image(plan: Plan) -> str:
    """pyxis writes `registry#repository:tag` (the registry separated by '#'); a path is a squashfs file (the
    site's recorded one, or, for an image only this machine's registry holds, the image store's, which the site
    makes with `dlrun images pull NAME --from REF --engine enroot`)."""
    squashfs = getattr(plan.image, "squashfs", None)
    if squashfs:
        return squashfs
    ref = image_reference(plan)
    if ref.startswith("docker://"):
        ref = ref[len("docker://"):]
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost") and "#" not in ref:
        return f"{first}#{rest}"
    return ref


@RUNTIMES.register("enroot")
class EnrootPyxisRuntime(ContainerRuntime):
    # pyxis runs inside srun on the compute nodes (a batch job): only doctor on a compute node looks for it.
    tool = Tool("enroot", "enroot and the pyxis Slurm plugin (https://github.com/NVIDIA/pyxis)")
    bind_forbidden = ",:"

    def check(self, plan: Plan) -> None:
        super().check(plan)
        if plan.scheduler != "slurm" or plan.launcher not in ("srun", "torchrun"):
            raise UsageError(f"runtime enroot runs through pyxis, which is a Slurm srun plugin, but the plan uses "
                             f"scheduler {plan.scheduler} with launcher {plan.launcher}; valid: --scheduler slurm "
                             "--launcher srun (or torchrun)")

    def image_copy(self, plan: Plan) -> ImageCopy:
        """The squashfs file pyxis runs, when the site's lock records one; else pyxis pulls the registry
        reference on the compute nodes, and there is no copy here to check."""
        if not plan.image.squashfs:
            return ImageCopy.unchecked(f"runtime {self.name} has pyxis pull {pyxis_image(plan)} on the compute "
                                       "nodes; the site's lock records no squashfs file to check")
        return ImageCopy("squashfs", what="squashfs file", path=plan.image.squashfs, shared=True,
                         how=f"dlrun images pull {plan.image.name} --from ... --engine {self.name}")

    def node_reference(self, plan: Plan) -> NodeReference:
        image = pyxis_image(plan)
        return NodeReference(image, "file" if image.startswith("/") else "registry")

    def wrap(self, plan: Plan, rank: RankCommand) -> RankCommand:
        mounts = [bind_spec(b.source, b.target, b.read_only) for b in plan.mounts]
        mounts += [bind_spec(device, device, False) for device in plan.devices]
        name = re.sub(r"[^A-Za-z0-9_-]", "-", f"dlrun-{plan.image.name}")
        flags = [f"--container-image={pyxis_image(plan)}",
                 Concat(Expand("--container-mounts=${DLRUN_RUN_DIR}:${DLRUN_RUN_DIR}"),
                        *("," + mount for mount in mounts)),
                 f"--container-name={name}",
                 Expand("--container-workdir=${DLRUN_RUN_DIR}"),
                 "--no-container-mount-home"]
        return rank.with_argv(rank.argv, launcher_args=(*rank.launcher_args, *flags))
