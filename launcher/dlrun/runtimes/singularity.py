"""`singularity` / `apptainer`: `exec --nv`, `-B src:dst[:ro]`, `--pwd`, env via `--env` or `SINGULARITYENV_`.

The container inherits the host environment (no `--cleanenv`): in the hybrid model the launcher's per-rank
variables (OMPI_*, PMIX_*, SLURM_*) must reach the rank. dlrun's own variables are also set explicitly, so a
value the image's environment would override still wins: with `--env NAME=VALUE` where the value is safe
in that flag's comma-separated syntax, else with the `SINGULARITYENV_`/`APPTAINERENV_` prefix.
"""
from __future__ import annotations

from dlrun.errors import UsageError
from dlrun.job import RankCommand
from dlrun.plan import Plan
from dlrun.registry import RUNTIMES, Tool
from dlrun.runtimes.base import ContainerRuntime, ImageCopy, NodeReference, image_reference
from dlrun.shell import Expand, SecretRef

ENV_PREFIX = {"singularity": "SINGULARITYENV_", "apptainer": "APPTAINERENV_"}


def env_flag_safe(value: str) -> bool:
    """`--env` parses its value as one CSV record of NAME=VALUE pairs. A secret goes by the prefixed variable
    instead, so that its value is never on a command line (`ps` shows those to every user of the node)."""
    if isinstance(value, SecretRef):
        return False
    return isinstance(value, Expand) or not any(ch in value for ch in ',"\n\r')


def bind_spec(source: str, target: str, read_only: bool) -> str:
    for path in (source, target):
        if "," in path or ":" in path:
            raise UsageError(f"bind path {path!r} contains ',' or ':', which -B cannot express; "
                             "valid: a path without ',' and ':'")
    return f"{source}:{target}" + (":ro" if read_only else "")


def singularity_image(plan: Plan) -> str:
    sif = getattr(plan.image, "sif", None)
    if sif:
        return sif
    ref = image_reference(plan)
    return ref if "://" in ref or ref.endswith(".sif") else f"docker://{ref}"


TOOLS = {"singularity": Tool("singularity", "SingularityCE (https://sylabs.io) or Apptainer"),
         "apptainer": Tool("apptainer", "Apptainer (https://apptainer.org)")}


@RUNTIMES.register("singularity", "apptainer")
class SingularityRuntime(ContainerRuntime):
    bind_forbidden = ",:"

    def __init__(self, name: str):
        super().__init__(name)
        self.tool = TOOLS[name]

    def image_copy(self, plan: Plan) -> ImageCopy:
        """The SIF file, on the filesystem the compute nodes share."""
        return ImageCopy("sif", what="SIF file", path=plan.image.sif, shared=True,
                         how=f"dlrun images pull {plan.image.name} --from ... --engine {self.name}")

    def node_reference(self, plan: Plan) -> NodeReference:
        image = singularity_image(plan)
        return NodeReference(image, "registry" if "://" in image else "file")

    def wrap(self, plan: Plan, rank: RankCommand) -> RankCommand:
        argv = [self.name, "exec"]
        if plan.device == "cuda":
            argv.append("--nv")
        argv += ["-B", Expand("${DLRUN_RUN_DIR}"), "--pwd", Expand("${DLRUN_RUN_DIR}")]
        for bind in plan.mounts:
            argv += ["-B", bind_spec(bind.source, bind.target, bind.read_only)]
        for device in plan.devices:
            argv += ["-B", bind_spec(device, device, False)]
        prefixed: dict[str, str] = {}
        for name, value in sorted(rank.env.items()):
            if env_flag_safe(value):
                argv += ["--env", Expand(f"{name}={value}") if isinstance(value, Expand) else f"{name}={value}"]
            else:
                prefixed[ENV_PREFIX[self.name] + name] = value
        argv += [singularity_image(plan), *rank.argv]
        return rank.with_argv(argv, env={**rank.env, **prefixed})
