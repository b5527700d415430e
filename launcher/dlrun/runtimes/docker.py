"""`docker`, `podman` (their CLIs) and `docker-api` (the Docker API through docker-py, against Docker or
Podman's compatible service at $DOCKER_HOST): one container per rank.

Flags, as NVIDIA recommends for deep-learning containers: host network and IPC (the ranks' rendezvous at
MASTER_ADDR:MASTER_PORT, NCCL's shared memory and the fabric need both; a daemon started without a bridge
has only `host` and `none` networks, and `none` would leave each rank alone in its own loopback; Podman
refuses --shm-size with host IPC, so it is not given), IPC_LOCK for RDMA memory registration, `--device`
for each fabric device, and the GPUs when the plan runs on CUDA (`--gpus all` for Docker, CDI
`--device nvidia.com/gpu=all` for Podman). Limits: Docker raises the stack to 64 MiB, and locked memory to
unlimited where the plan needs it (an RDMA fabric or CUDA): raising it past the node's own hard limit needs
CAP_SYS_RESOURCE, which a daemon in an unprivileged container lacks ("error setting rlimit type 8:
operation not permitted"), and a CPU job over TCP locks no memory. Podman (rootless, or without
CAP_SYS_RESOURCE) may not raise a limit at all, so it passes the node's own limits (`--ulimit host`), which
RDMA sites already set to unlimited locked memory.

Docker (not Podman, whose rootless containers map their root to the user) runs the rank as the user who
started the job (`--user "$(id -u):$(id -g)"`): what it writes into the run directory or a checkpoint
folder belongs to that user, not to root. It starts a minimal init (`--init`) as the container's first
process: the rank itself would be PID 1, which ignores SIGTERM and SIGINT unless it installs handlers, so
the signal that `docker run` forwards when the launcher, the scheduler or dlrun ends a rank would leave
the container running. Every container carries the run directory as a label (`dlrun.run-dir`), and after
a local job the executor removes any container still labelled with it (`leftover_cleanup`): a `docker
run` killed with SIGKILL forwards nothing. Binds `-v SRC:DST[:ro]`; the run directory is bound at its own path and is the working
directory. Environment: `-e NAME` passes each rank variable from the launcher's environment; the
launcher's per-rank prefixes (OMPI_*, PMIX_*) are added as Podman's `-e PREFIX*`, and for Docker, which
has no prefix form, by a `sh -c` that lists them when the rank starts.

The image is run by its ID (the content digest recorded in images.lock) when it is locked, so what runs
is exactly what was verified; otherwise by `uri:<arch>`.
"""
from __future__ import annotations

import shlex
import sys

from dlrun.errors import UsageError
from dlrun.job import RUN_DIR_VAR, RankCommand
from dlrun.plan import Plan, fabric_for
from dlrun.registry import RUNTIMES, Tool
from dlrun.runtimes.base import ContainerRuntime, ContainerService, ImageCopy, NodeReference, image_reference
from dlrun.shell import Concat, Expand

COMMON = ["--network=host", "--ipc=host"]
STACK_LIMIT = ["--ulimit", "stack=67108864"]
MEMLOCK_LIMIT = ["--ulimit", "memlock=-1"]
PODMAN_LIMITS = ["--ulimit", "host"]
#: the label every rank's container carries: the run directory, as the job sees it
RUN_LABEL = "dlrun.run-dir"
RUN_DIR = Expand("${" + RUN_DIR_VAR + "}")


def locks_memory(plan: Plan) -> bool:
    """RDMA memory registration (the fabric's), or CUDA's pinned buffers."""
    return fabric_for(plan).ipc_lock or plan.device == "cuda"


def run_label() -> Concat:
    return Concat(f"--label={RUN_LABEL}=", RUN_DIR)


def container_image(plan: Plan) -> str:
    return plan.image.digest or image_reference(plan)


def bind_flag(source: str, target: str, read_only: bool) -> str:
    if ":" in source or ":" in target:
        raise UsageError(f"bind {source}:{target} contains ':', which -v cannot express; valid: paths without ':'")
    return f"{source}:{target}" + (":ro" if read_only else "")


# A container per rank under a host launcher that wires the ranks up through its PMIx server (mpirun, srun
# --mpi=pmix) reaches that server only from the host's PID namespace (else Open MPI's shared memory between the
# node's ranks faults), with the server's directory at its own path (PMIx's shared-memory datastore and Open
# MPI's segments live there) and as the launcher's user (PMIx refuses a client of another uid, and mpirun then
# waits forever). Measured with Docker 20.10 and Podman 4.3 and Open MPI 4.1 on both sides
# (tests/test_host_mpi_containers.py); the values exist only where the rank starts, hence a `sh -c`.
HOST_PMIX_FLAGS = ('--pid=host --user "$(id -u):$(id -g)" '
                   '${PMIX_SERVER_TMPDIR:+-v "$PMIX_SERVER_TMPDIR:$PMIX_SERVER_TMPDIR"} ')


def host_pmix(rank: RankCommand) -> bool:
    """The rank is started by a host launcher whose PMIx variables it inherits."""
    return "PMIX_" in rank.passthrough_prefixes


# A Docker container is started by the daemon, not by the `docker run` process: it does not inherit the CPU
# affinity the rank was bound with (taskset), so that affinity is handed over as its cpuset (measured: a
# container started under `taskset -c 1 docker run` sees CPUs 0-1; with --cpuset-cpus=1, CPU 1). Podman's
# containers descend from its own process and inherit it.
CPUSET_FLAG = '--cpuset-cpus="$(awk \'/^Cpus_allowed_list:/ {print $2}\' /proc/self/status)" '


def prefix_env_script(engine: str, prefixes: tuple[str, ...], pmix: bool = False) -> str:
    """`sh -c` program that runs the container with the rank's CPU affinity as its cpuset (Docker), what a host
    PMIx launcher's server needs (HOST_PMIX_FLAGS), and `--env=NAME` for every variable with one of
    `prefixes`."""
    pattern = "|".join(prefixes)
    env = f'$(env | grep -oE "^({pattern})[A-Za-z0-9_]*=" | sed "s/^/--env=/; s/=$//") ' if prefixes else ""
    return (f'exec {engine} run {CPUSET_FLAG if engine == "docker" else ""}{HOST_PMIX_FLAGS if pmix else ""}'
            f'{env}"$@"')


class _EngineRuntime(ContainerRuntime):
    engine = "docker"

    def image_copy(self, plan: Plan) -> ImageCopy:
        """The engine's image of the plan's tag (its ID is the lock's `digest`)."""
        image, arch = plan.image, plan.image_arch
        return ImageCopy("digest", reference=f"{image.uri}:{arch}", tool=self.tool,
                         how=f"dlrun images load {image.name}_{arch}.tar {image.name} --engine ...")

    def gpu_flags(self, plan: Plan) -> list[str]:
        return ["--gpus", "all"] if plan.device == "cuda" else []

    def limits(self, plan: Plan) -> list[str]:
        return [*(MEMLOCK_LIMIT if locks_memory(plan) else []), *STACK_LIMIT]

    def own_flags(self) -> list[str]:
        """Flags only this engine takes (Docker: the job's user, an init process)."""
        return []

    def leftover_cleanup(self, run_dir: str) -> list[str] | None:
        """The command that removes every container a run left (its label names the run directory)."""
        label = shlex.quote(f"label={RUN_LABEL}={run_dir}")
        return ["sh", "-c", f"{self.engine} ps -aq --filter {label} | xargs -r {self.engine} rm -f"]

    def node_reference(self, plan: Plan) -> NodeReference:
        """The image ID (or tag) the node's own engine holds, or the registry digest it pulls."""
        image = container_image(plan)
        return NodeReference(image, "registry" if image == plan.image.repo_digest else "engine")

    def options(self, plan: Plan, rank: RankCommand) -> list[str]:
        argv = ["--rm", *self.own_flags(), run_label(), *COMMON, *self.limits(plan), "--cap-add", "IPC_LOCK",
                *self.gpu_flags(plan)]
        for device in plan.devices:
            argv += ["--device", device]
        argv += ["-v", Expand("${%s}:${%s}" % (RUN_DIR_VAR, RUN_DIR_VAR)), "-w", RUN_DIR]
        for bind in plan.mounts:
            argv += ["-v", bind_flag(bind.source, bind.target, bind.read_only)]
        for name in sorted(set(rank.env) | set(rank.passthrough)):
            argv += ["-e", name]
        return argv


@RUNTIMES.register("docker")
class DockerRuntime(_EngineRuntime):
    engine = "docker"
    tool = Tool("docker", "Docker Engine with the NVIDIA Container Toolkit")
    service = ContainerService("docker", status_argv=("docker", "version", "--format", "{{.Server.Version}}"))

    def own_flags(self) -> list[str]:
        return ["--init", "--user", Expand("$(id -u):$(id -g)")]

    def wrap(self, plan: Plan, rank: RankCommand) -> RankCommand:
        rest = [*self.options(plan, rank), container_image(plan), *rank.argv]
        argv = ["sh", "-c", prefix_env_script(self.engine, rank.passthrough_prefixes, host_pmix(rank)),
                "dlrun-docker", *rest]
        return rank.with_argv(argv)


@RUNTIMES.register("podman")
class PodmanRuntime(_EngineRuntime):
    engine = "podman"
    tool = Tool("podman", "Podman (Debian: apt-get install podman)")
    # `podman info` fails when its storage or OCI runtime configuration is broken
    service = ContainerService("podman", status_argv=("podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"))

    def gpu_flags(self, plan: Plan) -> list[str]:
        return ["--device", "nvidia.com/gpu=all"] if plan.device == "cuda" else []

    def limits(self, plan: Plan) -> list[str]:
        return PODMAN_LIMITS

    def wrap(self, plan: Plan, rank: RankCommand) -> RankCommand:
        run = ["sh", "-c", f'exec {self.engine} run {HOST_PMIX_FLAGS}"$@"', "dlrun-podman"] if host_pmix(rank) \
            else [self.engine, "run"]
        argv = [*run, *self.options(plan, rank)]
        argv += [f"--env={prefix}*" for prefix in rank.passthrough_prefixes]
        argv += [container_image(plan), *rank.argv]
        return rank.with_argv(argv)


@RUNTIMES.register("docker-api")
class DockerApiRuntime(_EngineRuntime):
    """Each rank runs `python -m dlrun.images.docker_run`, which drives the Docker API with docker-py at
    $DOCKER_HOST (the `docker` runtime's settings against Docker, the `podman` runtime's against Podman),
    streams the container's output, and exits with its status. It refuses to start an image whose ID is
    not the plan's digest."""

    service = ContainerService("docker", via_api=True)

    def leftover_cleanup(self, run_dir: str) -> list[str] | None:
        return [sys.executable, "-m", "dlrun.images.docker_run", "--remove-run", run_dir]

    def joins_launcher_session(self, plan: Plan, rank: RankCommand) -> bool:
        return not host_pmix(rank)  # docker_run starts the container without HOST_PMIX_FLAGS

    def wrap(self, plan: Plan, rank: RankCommand) -> RankCommand:
        argv = [sys.executable, "-m", "dlrun.images.docker_run", "--image", container_image(plan)]
        if plan.image.digest:
            argv += ["--expect-digest", plan.image.digest]
        if plan.device == "cuda":
            argv += ["--gpus", "all"]
        if locks_memory(plan):
            argv += ["--memlock"]
        for device in plan.devices:
            argv += ["--device", device]
        argv += ["-v", Expand("${%s}:${%s}" % (RUN_DIR_VAR, RUN_DIR_VAR)), "-w", Expand("${" + RUN_DIR_VAR + "}")]
        for bind in plan.mounts:
            argv += ["-v", bind_flag(bind.source, bind.target, bind.read_only)]
        for name in sorted(set(rank.env) | set(rank.passthrough)):
            argv += ["-e", name]
        for prefix in rank.passthrough_prefixes:
            argv += ["--env-prefix", prefix]
        argv += ["--", *rank.argv]
        return rank.with_argv(argv)
