"""Run one rank in a container through the Docker API (docker-py), for the `docker-api` runtime.

    python -m dlrun.images.docker_run --image IMAGE [--expect-digest sha256:...] [-v SRC:DST[:ro]]...
        [-e NAME]... [--env-prefix PREFIX]... [--device DEV]... [--gpus all] [--memlock] [-w DIR] -- CMD...
    python -m dlrun.images.docker_run --remove-run RUN_DIR

The endpoint is $DOCKER_HOST (Docker, or Podman's `podman system service`). Settings match the `docker`
runtime against Docker (host network and IPC, the stack limit, memlock where the plan locks memory,
IPC_LOCK, the caller's user, an init process), and the `podman` runtime's against Podman (its configured
limits instead of raised ones). Output is streamed as it comes (stdout and stderr apart); the exit status
is the container's. SIGINT/SIGTERM are forwarded to the container, and the container is removed however
it ends. Every container is labelled with $DLRUN_RUN_DIR; `--remove-run` removes those a run left (a
helper killed with SIGKILL removes nothing itself).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m dlrun.images.docker_run")
    parser.add_argument("--image", required=True)
    parser.add_argument("--expect-digest")
    parser.add_argument("-v", dest="volumes", action="append", default=[])
    parser.add_argument("-e", dest="env", action="append", default=[])
    parser.add_argument("--env-prefix", action="append", default=[])
    parser.add_argument("--device", action="append", default=[])
    parser.add_argument("--gpus")
    parser.add_argument("--memlock", action="store_true")
    parser.add_argument("-w", dest="workdir")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command given after --")
    return args


def environment(names: list[str], prefixes: list[str], source: dict[str, str]) -> dict[str, str]:
    """`-e NAME` semantics: pass the value from this process's environment; unset names are left out."""
    env = {name: source[name] for name in names if name in source}
    env.update({k: v for k, v in source.items() if any(k.startswith(p) for p in prefixes)})
    return env


def volumes(specs: list[str]) -> dict[str, dict[str, str]]:
    out = {}
    for spec in specs:
        parts = spec.split(":")
        mode = "rw"
        if len(parts) == 3:
            mode = parts.pop()
        source, target = parts
        out[source] = {"bind": target, "mode": mode}
    return out


def is_podman(client) -> bool:
    components = client.version().get("Components") or []
    return any("podman" in (c.get("Name") or "").lower() for c in components)


RUN_LABEL = "dlrun.run-dir"  # the docker runtime's label (dlrun.runtimes.docker.RUN_LABEL)


def remove_run(run_dir: str) -> int:
    """Remove every container labelled with `run_dir`; the number removed."""
    import docker

    client = docker.from_env(timeout=120)
    found = client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_dir}"})
    for container in found:
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
    return len(found)


def _pump(stream, out) -> None:
    for chunk in stream:
        out.buffer.write(chunk)
        out.flush()


def engine_settings(args: argparse.Namespace, podman: bool) -> dict:
    """What differs between Docker and Podman (see the module's docstring)."""
    from docker.types import DeviceRequest, Ulimit

    kwargs: dict = {}
    if not podman:
        # Podman may not raise limits (rootless, no CAP_SYS_RESOURCE); it applies containers.conf's instead.
        kwargs["ulimits"] = [Ulimit(name="stack", soft=67108864, hard=67108864)]
        if args.memlock:
            kwargs["ulimits"].append(Ulimit(name="memlock", soft=-1, hard=-1))
        kwargs.update(init=True, user=f"{os.getuid()}:{os.getgid()}")
    if args.gpus:
        kwargs["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < (os.cpu_count() or len(allowed)):  # bound (dlrun's affinity wrapper): the container too
        kwargs["cpuset_cpus"] = ",".join(str(cpu) for cpu in allowed)
    return kwargs


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--remove-run"] and len(argv) == 2:
        remove_run(argv[1])
        return 0
    args = parse_args(argv)
    import docker
    try:
        client = docker.from_env(timeout=600)
        image = client.images.get(args.image)
    except docker.errors.ImageNotFound:
        print(f"docker_run: image {args.image} is not in the engine at {os.environ.get('DOCKER_HOST', 'the default socket')}",
              file=sys.stderr)
        return 125
    except docker.errors.DockerException as exc:
        print(f"docker_run: cannot reach the Docker API at {os.environ.get('DOCKER_HOST', 'the default socket')}: {exc}",
              file=sys.stderr)
        return 125
    if args.expect_digest and image.id != args.expect_digest:
        print(f"docker_run: refusing image {args.image}: its ID is {image.id}, the plan's digest is {args.expect_digest}",
              file=sys.stderr)
        return 125
    kwargs = dict(
        command=args.command, detach=True, network_mode="host", ipc_mode="host", cap_add=["IPC_LOCK"],
        environment=environment(args.env, args.env_prefix, dict(os.environ)), volumes=volumes(args.volumes),
        devices=[f"{d}:{d}:rwm" for d in args.device], working_dir=args.workdir,
        labels={RUN_LABEL: os.environ.get("DLRUN_RUN_DIR", "")}, **engine_settings(args, is_podman(client)))
    container = client.containers.run(image.id, **kwargs)

    def stop(signum, _frame):
        try:
            container.kill(signal=signum)
        except docker.errors.DockerException:
            pass

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    pumps = [threading.Thread(target=_pump, args=(container.logs(stdout=True, stderr=False, stream=True, follow=True),
                                                  sys.stdout), daemon=True),
             threading.Thread(target=_pump, args=(container.logs(stdout=False, stderr=True, stream=True, follow=True),
                                                  sys.stderr), daemon=True)]
    for pump in pumps:
        pump.start()
    status = container.wait().get("StatusCode", 1)
    for pump in pumps:
        pump.join(timeout=30)
    try:
        container.remove(force=True)
    except docker.errors.DockerException:
        pass
    return int(status)


if __name__ == "__main__":
    sys.exit(main())
