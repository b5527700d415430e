"""`singularity` and `apptainer`: their CLIs, one SIF file per image and architecture in the image store.
Both pull from `docker://`, `oras://`, `library://`, `shub://` and `http(s)://` (their `pull --help`), and
push to `oras://` and `library://`; a bare registry reference gets `docker://` in front. A registry on the
loopback interface is spoken to over plain HTTP (`--no-https`), as Docker treats 127.0.0.0/8 as insecure.

`build` says what it builds from. The generated `Singularity.<arch>.def` bootstraps from a registry
(`Bootstrap: docker`); where the spec has a `debootstrap:` section, the SIF is converted instead from the
Docker archive dlrun bootstraps without any registry (`build --engine debootstrap`, made first when
missing): `build SIF docker-archive://ARCHIVE`. That SIF holds the very image the other engines run, so
the lock keeps the archive's image ID (`digest`) beside the SIF's sha256 (`sif`), and `sif_from` says which
image ID it was converted from; a second build of the same image ID finds the SIF up to date.
"""
from __future__ import annotations

import ipaddress
import os
from pathlib import Path

from dlrun.errors import DlrunError
from dlrun.images import debootstrap, lock
from dlrun.images.archive import read_docker_archive
from dlrun.images.context import BuildContext, assemble, build_context
from dlrun.images.digest import file_sha256
from dlrun.images.engines.base import Log, Result, Target
from dlrun.images.engines.single_file import SingleFileEngine
from dlrun.images.refs import REGISTRY, Location, parse_location, split_registry
from dlrun.images.spec import archive_path, sif_path
from dlrun.images.steps import Command, Note, require_tool, tools
from dlrun.registry import ENGINES, Tool

#: definition-file bootstrap agents that read only local files (Apptainer's "Build a container" docs)
OFFLINE_BOOTSTRAPS = frozenset({"localimage", "docker-archive", "oci-archive", "scratch"})


def def_header(path: Path) -> dict[str, str]:
    """The `Bootstrap:` and `From:` of a definition file (its header, before the first section)."""
    header: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("%"):
            break
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("bootstrap", "from"):
            header[key.strip().lower()] = value.strip()
    return header


def loopback_registry(location: Location) -> bool:
    """The registry of a `docker://` or `oras://` location is this machine's loopback interface."""
    if location.scheme not in (REGISTRY, "docker", "oras"):
        return False
    registry = split_registry(location.registry_reference)[0] or ""
    host = registry[1:registry.find("]")] if registry.startswith("[") else registry.split(":")[0]  # [::1]:5000
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@ENGINES.register("singularity", "apptainer")
class SingularityEngine(SingleFileEngine):
    lock_field = "sif"
    what = "SIF file"
    pull_schemes = (REGISTRY, "docker", "oras", "library", "shub", "http", "https")
    push_schemes = ("oras", "library")
    save_suffix = ".sif"
    obtain_hint = "build, pull or load the SIF first"

    @property
    def tools(self) -> tuple[Tool, ...]:
        return tools(self.name)

    def render_pull(self, location: Location) -> str:
        if location.scheme in (REGISTRY, "docker"):
            return f"docker://{location.registry_reference}"
        return location.given

    def render_push(self, location: Location) -> str:
        return location.given

    @staticmethod
    def http_flags(given: str) -> list[str]:
        return ["--no-https"] if loopback_registry(parse_location(given)) else []

    # ------------------------------------------------------------------------------------------------ build
    def build(self, t: Target, *, dry_run: bool = False, log: Log = print) -> Result:
        context = build_context(t.spec_file, t.arch)
        recipe = context.recipe(t.arch, "singularity")
        header = def_header(context.files[recipe])
        agent = header.get("bootstrap", "").lower()
        if t.spec_file.spec.debootstrap is not None and agent not in OFFLINE_BOOTSTRAPS:
            why = (f"not from {recipe}: its `Bootstrap: {header.get('bootstrap')}` pulls {header.get('from')} from a "
                   "registry")
            return self.build_from_archive(t, why, dry_run=dry_run, log=log)
        return self.build_from_recipe(t, context, recipe, header, dry_run=dry_run, log=log)

    def build_from_recipe(self, t: Target, context: BuildContext, recipe: str, header: dict[str, str], *,
                          dry_run: bool, log: Log) -> Result:
        sif = sif_path(t.name, t.arch)
        fakeroot = [] if os.geteuid() == 0 else ["--fakeroot"]
        source = f"`Bootstrap: {header.get('bootstrap')}`" + (f" from {header['from']}" if header.get("from") else "")
        steps = [context.note(), Note(f"build from {recipe} ({source})"), Command(["mkdir", "-p", str(sif.parent)]),
                 Command([self.name, "build", *fakeroot, str(sif), recipe], cwd=str(context.path))]
        if dry_run:
            return Result(steps)
        self.ensure_native(t, self.name)
        require_tool(self.name)
        log(steps[1].text_)
        assemble(context)
        self.run(steps)
        entry = self.record(t, f"build ({self.name})", replace=True, sif=file_sha256(sif),
                            size_bytes=sif.stat().st_size, sif_from=recipe)
        return Result(steps, entry)

    def build_from_archive(self, t: Target, why: str, *, dry_run: bool, log: Log) -> Result:
        sif, archive = sif_path(t.name, t.arch), archive_path(t.name, t.arch)
        image_id = self.locked_archive(t)
        steps: list = [Note(f"build from the Docker archive {archive} that dlrun bootstraps without a registry, {why}")]
        if image_id is None:
            steps += debootstrap.planned_commands(t.spec_file, t.arch)
        steps += [Command(["mkdir", "-p", str(sif.parent)]),
                  Command([self.name, "build", "--force", str(sif), f"docker-archive://{archive}"])]
        if dry_run:
            return Result(steps)
        require_tool(self.name)
        log(steps[0].text_)
        if image_id is None:
            fields = debootstrap.build(t.spec_file, t.arch, log)
            lock.record(t.name, t.arch, replace=True, **fields)
            image_id = fields["digest"]
        known = lock.entry(t.name, t.arch) or {}
        sif_from = f"docker-archive {image_id}"
        if known.get("sif_from") == sif_from and sif.is_file() and file_sha256(sif) == known.get("sif"):
            log(f"{sif}: up to date (converted from image ID {image_id})")
            return Result(steps, known)
        self.run(steps[-2:])
        entry = lock.record(t.name, t.arch, sif=file_sha256(sif), sif_from=sif_from)
        log(f"{sif}: {sif.stat().st_size / 1e6:.0f} MB, {entry['sif']}")
        return Result(steps, entry)

    @staticmethod
    def locked_archive(t: Target) -> str | None:
        """The image ID of the store's Docker archive when it is the one images.lock records; None when the
        archive is missing or the lock has no image ID (then the debootstrap build makes or confirms it)."""
        archive = archive_path(t.name, t.arch)
        recorded = (lock.entry(t.name, t.arch) or {}).get("digest")
        if not archive.is_file() or not recorded:
            return None
        actual = read_docker_archive(archive).image_id
        if actual != recorded:
            from dlrun.images.engines.base import mismatch

            raise mismatch(t.name, t.arch, "image ID", recorded, actual, str(archive))
        return actual

    # ------------------------------------------------------------------------------------------------ sharing
    def pull(self, t: Target, source: str, *, dry_run: bool = False, log: Log = print) -> Result:
        sif = sif_path(t.name, t.arch)
        pulled = sif.with_name(f".{sif.name}.pull")  # the store's copy stays until the pulled one is verified
        steps = [Command(["mkdir", "-p", str(sif.parent)]),
                 Command([self.name, "pull", "--force", *self.http_flags(source), str(pulled), self.pull_from(source)]),
                 Note(f"compare its sha256 with images.lock, then move it to {sif}")]
        if dry_run:
            return Result(steps)
        require_tool(self.name)
        self.run(steps)
        digest = file_sha256(pulled)
        try:
            self.check_against_lock(t, digest, f"the SIF pulled from {source}")
        except DlrunError:
            pulled.unlink()
            raise
        pulled.replace(sif)
        entry = self.record(t, f"pull ({self.name}) {source}", sif=digest)
        return Result(steps, entry)

    def push(self, t: Target, destination: str, *, dry_run: bool = False) -> Result:
        steps = [Command([self.name, "push", *self.http_flags(destination), str(sif_path(t.name, t.arch)),
                          self.push_to(destination)])]
        if dry_run:
            return Result(steps)
        require_tool(self.name)
        entry = self.verify(t).entry
        self.run(steps)
        return Result(steps, entry, [f"pushed {destination}"])

    def image_file(self, t: Target) -> Path:
        return sif_path(t.name, t.arch)

    def load(self, t: Target, archive: Path, *, dry_run: bool = False, log: Log = print) -> Result:
        return self.load_file(t, archive, dry_run=dry_run)
