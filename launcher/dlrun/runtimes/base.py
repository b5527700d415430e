"""Container runtimes wrap one rank's command so that it runs in the plan's image (binds, devices, env, GPUs).

`Runtime` is the base of every runtime; `ContainerRuntime` is the base of those that need a container image
(all but `host`), and refuses the host's own Python with one line. A runtime also says what the checks need
to know about it: whether it runs a container at all, the engine service its containers need, and where its
copy of the image is and how that copy's digest is read (`image_copy`), which every container runtime must
say: a run records the digest it ran.
"""
from __future__ import annotations

from dataclasses import dataclass

from dlrun.errors import UsageError
from dlrun.job import RankCommand
from dlrun.plan import Plan
from dlrun.registry import Tool


@dataclass(frozen=True)
class ContainerService:
    """The engine service a runtime starts its containers with; it must answer on the node that runs them."""

    engine: str  #: docker or podman: whose CLI runs the containers, or whose default API socket is used
    via_api: bool = False  #: through the Docker API at $DOCKER_HOST (docker-py) instead of the engine's CLI
    status_argv: tuple[str, ...] = ()  #: (CLI) the cheapest command that fails when it cannot run containers


@dataclass(frozen=True)
class NodeReference:
    """What every compute node of the job resolves to start the image (dlrun.jobcheck's container-reference
    rule): a registry reference, a file or tree path, an image the node's own engine holds, or nothing."""

    text: str
    kind: str  #: registry | file | engine | none


def registry_host(reference: str) -> str | None:
    """The registry a reference names (`localhost`, `registry.example.org:5000`), or None (Docker Hub, a path)."""
    ref = reference.split("://", 1)[-1]
    if ref.startswith("/"):
        return None
    first, sep, rest = ref.replace("#", "/", 1).partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return None


def is_loopback_registry(reference: str) -> bool:
    """A registry on this machine only: `localhost`, `127.x.y.z`, `[::1]` (with or without a port)."""
    host = registry_host(reference)
    if host is None:
        return False
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
    return name in ("localhost", "[::1]") or name.startswith("127.")


@dataclass(frozen=True)
class ImageCopy:
    """Where a runtime's copy of the plan's image is and how its digest is read: the pre-run check compares
    it with the site's image lock (dlrun.images.verify), the node checks look for it (dlrun.preflight.node)."""

    field: str | None  #: the images.lock field its digest is compared with; None: no copy is checked (`why`)
    why: str = ""        #: (field None) why no copy is checked, recorded with the run
    what: str = "image"  #: the copy in words: "unpacked root filesystem", "SIF file"
    how: str = ""        #: the command that makes the copy here
    #: A file (its sha256) or an unpacked tree (its tree digest); None: the runtime's engine service holds the
    #: copy under `reference` and reports its image ID.
    path: str | None = None
    reference: str | None = None  #: the engine's name for the image
    shared: bool = False  #: it lies on a filesystem the compute nodes share: a submit host checks it too
    tool: Tool | None = None  #: needed on PATH to read the digest before a local run

    @classmethod
    def unchecked(cls, why: str) -> "ImageCopy":
        return cls(field=None, why=why)


class Runtime:
    #: The program this runtime runs on the compute node (None: nothing beyond the rank command).
    tool: Tool | None = None
    #: Characters this runtime's bind syntax cannot carry in a path (the run directory is bound too).
    bind_forbidden = ""
    #: It runs the rank in a container: binds are mounted, and the image's MPI (not the host's) is loaded.
    runs_container = False
    #: The engine service its containers need (None: none, e.g. ch-run and singularity are plain programs).
    service: ContainerService | None = None

    def __init__(self, name: str):
        self.name = name

    def check(self, plan: Plan) -> None:
        """Raise UsageError when this runtime cannot run the plan (e.g. it needs another launcher)."""

    def image_copy(self, plan: Plan) -> ImageCopy:
        """This runtime's copy of the plan's (container) image on this machine."""
        return ImageCopy.unchecked(f"runtime {self.name} runs no container, so it uses no copy of the image")

    def wrap(self, plan: Plan, rank: RankCommand) -> RankCommand:
        raise NotImplementedError

    def leftover_cleanup(self, run_dir: str) -> list[str] | None:
        """The command that removes what a run's ranks left behind them outside the job's own processes (an
        engine service's containers), run after a local job however it ended; None: nothing outlives a rank."""
        return None

    def node_reference(self, plan: Plan) -> NodeReference:
        """What the compute nodes resolve to start the plan's image (nothing: the host's own environment)."""
        return NodeReference("", "none")

    def joins_launcher_session(self, plan: Plan, rank: RankCommand) -> bool:
        """Whether a rank it starts can reach the PMIx server of the host launcher that started it (same PID
        namespace, the server's directory, the launcher's user): true for runtimes that run the rank as a child
        process of the launcher in the host's namespaces."""
        return True


class ContainerRuntime(Runtime):
    """A runtime that starts the plan's container image."""

    bind_forbidden = ":"
    runs_container = True

    def image_copy(self, plan: Plan) -> ImageCopy:
        raise NotImplementedError(f"runtime {self.name} does not say where its copy of an image is")

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
        return f"{uri}:{plan.image_arch}"
    return uri
