"""`docker`, `docker-api` and `podman`: the Docker API through docker-py, Docker's daemon or Podman's
compatible service (`podman system service --time=0 unix:///run/podman/podman.sock`). Endpoint: --host,
else $DOCKER_HOST, else the engine's default socket. Steps print as the CLI command that does the same.

The API takes registry references bare (`REGISTRY/REPO:TAG`), so `--from docker://...` loses its scheme
(the `docker pull` CLI refuses `docker://` too). The digest is the image ID, the same in Docker and Podman
and across save/load/push/pull.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from dlrun.errors import DlrunError
from dlrun.images import docker_api, lock
from dlrun.images.context import assemble, build_context
from dlrun.images.engines.base import Engine, Log, Result, Target, mismatch
from dlrun.images.refs import REGISTRY, Location
from dlrun.images.steps import ApiCall, Note, tools
from dlrun.registry import ENGINES, Tool

#: the CLI whose command line each step prints, and whose default socket the engine talks to
CLI = {"docker": "docker", "docker-api": "docker", "podman": "podman"}


@ENGINES.register("docker", "docker-api", "podman")
class DockerApiEngine(Engine):
    lock_field = "digest"
    what = "image ID"
    pushes_image = True
    pull_schemes = (REGISTRY, "docker")
    push_schemes = (REGISTRY, "docker")

    @property
    def tools(self) -> tuple[Tool, ...]:
        return tools("podman" if CLI[self.name] == "podman" else "dockerd")

    def render_pull(self, location: Location) -> str:
        return location.registry_reference

    def render_push(self, location: Location) -> str:
        return location.registry_reference

    def endpoint(self, t: Target) -> str:
        return docker_api.endpoint(CLI[self.name], t.host)

    def client(self, t: Target):
        return docker_api.client(CLI[self.name], t.host)

    def call(self, t: Target, *argv: str) -> ApiCall:
        return ApiCall([CLI[self.name], *argv], self.endpoint(t))

    def build(self, t: Target, *, dry_run: bool = False, log: Log = print) -> Result:
        context = build_context(t.spec_file, t.arch)
        recipe = context.recipe(t.arch, "docker")
        steps = [context.note(), self.call(t, "build", "--network", "host", "-f", recipe, "-t", t.reference,
                                           "--platform", docker_api.PLATFORM[t.arch], str(context.path))]
        if dry_run:
            return Result(steps)
        api = self.client(t)
        docker_api.build(api, context=assemble(context), dockerfile=recipe, tag=t.reference, arch=t.arch, log=log)
        entry = self.record(t, f"build ({self.name})", replace=True, **docker_api.inspect(api, t.reference))
        return Result(steps, entry)

    def pull(self, t: Target, source: str, *, dry_run: bool = False, log: Log = print) -> Result:
        reference = self.pull_from(source)
        steps = [Note(f"resolve {reference} to its {t.arch} image in the registry (oras-py): the manifest by "
                      "digest, and its image config, whose digest must be the image ID asked for and locked"),
                 self.call(t, "pull", "--platform", docker_api.PLATFORM[t.arch], reference),
                 self.call(t, "tag", reference, t.reference)]
        if dry_run:
            return Result(steps)
        resolved = self.registry_image(t, reference)  # refused here, before a layer is downloaded
        exact = resolved.manifest_reference
        steps[1:] = [self.call(t, "pull", "--platform", docker_api.PLATFORM[t.arch], exact),
                     self.call(t, "tag", exact, t.reference)]
        api = self.client(t)
        found = docker_api.pull(api, exact, arch=t.arch, tag=t.reference)
        if found != resolved.config:
            raise mismatch(t.name, t.arch, self.what, resolved.config, found, f"the engine after pulling {exact}")
        self.check_against_lock(t, found, f"{exact} (pulled)")
        fields = {k: v for k, v in docker_api.inspect(api, t.reference).items() if k != "repo_digests"}
        entry = self.record_registry(t, resolved, recorded_by=f"pull ({self.name}) {source}", **fields)
        return Result(steps, entry, [f"pulled {exact}" + (f" from the index {resolved.index_reference}"
                                                          if resolved.index else "")])

    def push(self, t: Target, destination: str, *, dry_run: bool = False) -> Result:
        pushed, index_tag, index_step = self.push_steps(t, destination)
        steps = [self.call(t, "tag", t.reference, pushed), self.call(t, "push", pushed), index_step]
        if dry_run:
            return Result(steps)
        self.verify(t)  # never share an image that is not the locked one
        docker_api.push(self.client(t), t.reference, pushed)
        entry, message = self.publish(t, pushed, index_tag)
        return Result(steps, entry, [message])

    def save(self, t: Target, output: Path, *, dry_run: bool = False) -> Result:
        steps = [self.call(t, "save", "-o", str(output), t.reference)]
        if dry_run:
            return Result(steps)
        self.verify(t)
        docker_api.save(self.client(t), t.reference, output)
        return Result(steps, lock.entry(t.name, t.arch), [f"saved {output}"])

    def load(self, t: Target, archive: Path, *, dry_run: bool = False, log: Log = print) -> Result:
        steps = [self.call(t, "load", "-i", str(archive)), self.call(t, "tag", "<loaded image>", t.reference)]
        if dry_run:
            return Result(steps)
        from dlrun.images.archive import read_docker_archive

        info = read_docker_archive(archive)
        known = self.check_against_lock(t, info.image_id, str(archive))
        steps[1] = self.call(t, "tag", info.image_id, t.reference)
        api = self.client(t)
        if docker_api.image_id(api, info.image_id) == info.image_id:
            log(f"{info.image_id[:19]}… is already in the engine; tagging it {t.reference}")
            api.images.get(info.image_id).tag(*docker_api.split_tag(t.reference))
        else:
            loaded = docker_api.load(api, archive, t.reference)
            if loaded != info.image_id:
                raise mismatch(t.name, t.arch, self.what, info.image_id, loaded,
                               f"the engine at {self.endpoint(t)} after loading")
        if known:  # the lock already describes this image; the engine's view adds nothing to it
            return Result(steps, lock.entry(t.name, t.arch),
                          [f"loaded {t.reference} ({info.image_id}), as images.lock records"])
        fields = {k: v for k, v in docker_api.inspect(api, t.reference).items() if k != "repo_digests"}
        entry = self.record(t, f"load ({self.name}) {archive.name}", **fields)
        return Result(steps, entry)

    def current_digest(self, t: Target) -> tuple[str, str]:
        found = docker_api.image_id(self.client(t), t.reference)
        if found is None:
            raise DlrunError(f"image {t.reference} is not in the engine at {self.endpoint(t)}; build, pull or load "
                             f"it first (dlrun images load ... --engine {self.name})")
        return found, f"{t.reference} at {self.endpoint(t)}"

    def lock_extra(self, t: Target) -> dict[str, Any]:
        return docker_api.inspect(self.client(t), t.reference)
