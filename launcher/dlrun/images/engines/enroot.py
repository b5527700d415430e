"""`enroot`: one squashfs file per image and architecture in the image store, what pyxis runs with
`srun --container-image=/path/NAME.sqsh` (so a job runs the very file this site verified, not whatever a
registry tag points to when the job starts).

`enroot import` (its doc/cmd/import.md) takes `docker://[USER@][REGISTRY#]IMAGE[:TAG]` (`#` between
registry and repository), `dockerd://IMAGE[:TAG]` (Docker's daemon) and `podman://IMAGE[:TAG]` (Podman's
local store), and refuses to overwrite its output. It has no scheme for an archive file and cannot
build, so a Docker archive is loaded into Podman's store and imported from there (`podman://`, no daemon
needed), and a build is Podman's build of the generated Dockerfile, imported the same way. enroot cannot
push; `save` hands on the .sqsh file itself, which `load` takes back.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from dlrun.images.context import assemble, build_context
from dlrun.images.digest import file_sha256
from dlrun.images.docker_api import PLATFORM
from dlrun.images.engines.base import Log, Result, Target
from dlrun.images.engines.single_file import SingleFileEngine
from dlrun.images.refs import REGISTRY, Location, enroot_docker_uri, parse_location
from dlrun.images.spec import squashfs_path
from dlrun.images.steps import Command, Note, require_tool, run_command, tools
from dlrun.registry import ENGINES, Tool

SQUASHFS_MAGIC = b"hsqs"  # the first four bytes of a (little-endian) squashfs image


def is_squashfs(path: Path) -> bool:
    """By content when the file is here, else (a dry run) by its name."""
    if path.is_file():
        with open(path, "rb") as handle:
            return handle.read(4) == SQUASHFS_MAGIC
    return path.suffix in (".sqsh", ".squashfs")


@ENGINES.register("enroot")
class EnrootEngine(SingleFileEngine):
    lock_field = "squashfs"
    what = "squashfs file"
    pull_schemes = (REGISTRY, "docker", "dockerd", "podman")
    save_suffix = ".sqsh"
    obtain_hint = "pull, build or load it first (dlrun images pull NAME --from REPO:TAG --engine enroot)"

    @property
    def tools(self) -> tuple[Tool, ...]:
        return tools("enroot", "podman")  # podman: builds, and archives reach enroot through its store

    def render_pull(self, location: Location) -> str:
        if location.scheme in (REGISTRY, "docker"):
            return enroot_docker_uri(location)
        return location.given  # dockerd://, podman://: a local image, named as the engine names it

    def import_steps(self, t: Target, uri: str) -> list[Command]:
        sqsh = squashfs_path(t.name, t.arch)
        return [Command(["mkdir", "-p", str(sqsh.parent)]),
                Command(["rm", "-f", str(sqsh)], note="enroot import refuses to overwrite its output"),
                Command(["enroot", "import", "--arch", t.arch, "-o", str(sqsh), uri])]

    def _imported(self, t: Target, source: str, recorded_by: str, *, built: bool = False,
                  **fields: Any) -> dict[str, Any]:
        """Record the imported file; a pulled or loaded one must match the lock, a build replaces the entry."""
        sqsh = squashfs_path(t.name, t.arch)
        digest = file_sha256(sqsh)
        if not built:
            self.check_against_lock(t, digest, f"{sqsh} (imported from {source})")
        return self.record(t, recorded_by, replace=built, squashfs=digest, size_bytes=sqsh.stat().st_size, **fields)

    def build(self, t: Target, *, dry_run: bool = False, log: Log = print) -> Result:
        context = build_context(t.spec_file, t.arch)
        steps = [context.note(),
                 Command(["podman", "build", "--platform", PLATFORM[t.arch], "-f", context.recipe(t.arch, "docker"),
                          "-t", t.reference, "."], cwd=str(context.path)),
                 *self.import_steps(t, f"podman://{t.reference}")]
        if dry_run:
            return Result(steps)
        self.ensure_native(t, "podman build")
        require_tool("podman")
        require_tool("enroot")
        assemble(context)
        self.run(steps)
        entry = self._imported(t, f"podman://{t.reference}", f"build ({self.name})", built=True,
                               digest=self._podman_id(t))
        return Result(steps, entry)

    def pull(self, t: Target, source: str, *, dry_run: bool = False, log: Log = print) -> Result:
        """A registry image is resolved first and imported by its manifest digest (`REGISTRY#REPO@sha256:...`,
        which enroot's import takes): the file is made from exactly the image the lock then names."""
        location = parse_location(source)
        steps = self.import_steps(t, self.pull_from(source))
        if dry_run:
            return Result(steps)
        require_tool("enroot")
        if location.scheme not in (REGISTRY, "docker"):  # dockerd://, podman://: the local engine's image
            self.run(steps)
            return Result(steps, self._imported(t, source, f"pull ({self.name}) {source}"))
        resolved = self.registry_image(t, location.registry_reference)
        steps = self.import_steps(t, self.pull_from(resolved.manifest_reference))
        self.run(steps)
        self._imported(t, source, f"pull ({self.name}) {source}", digest=resolved.config)
        return Result(steps, self.record_registry(t, resolved))

    def image_file(self, t: Target) -> Path:
        return squashfs_path(t.name, t.arch)

    def load(self, t: Target, archive: Path, *, dry_run: bool = False, log: Log = print) -> Result:
        """A .sqsh file (another site's `save`) is copied; a Docker archive goes through Podman's store."""
        if is_squashfs(archive):
            return self.load_file(t, archive, dry_run=dry_run)
        image_id = "<loaded image>"
        if not dry_run:
            from dlrun.images.archive import read_docker_archive

            image_id = read_docker_archive(archive).image_id
            self.check_against_lock(t, image_id, str(archive), "digest", "image ID")
        steps = [Note(f"compare the image ID of {archive} with images.lock"),
                 Command(["podman", "load", "-i", str(archive)]),
                 Command(["podman", "tag", image_id, t.reference]),
                 *self.import_steps(t, f"podman://{t.reference}")]
        if dry_run:
            return Result(steps)
        require_tool("podman")
        require_tool("enroot")
        self.run(steps)
        entry = self._imported(t, str(archive), f"load ({self.name}) {archive.name}", digest=image_id)
        return Result(steps, entry)

    @staticmethod
    def _podman_id(t: Target) -> str:
        found = run_command(Command(["podman", "image", "inspect", "--format", "{{.Id}}", t.reference]),
                            quiet=True).strip()
        return found if found.startswith("sha256:") else f"sha256:{found}"
