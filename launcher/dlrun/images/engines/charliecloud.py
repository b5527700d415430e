"""`charliecloud`: an unpacked root filesystem in the image store, what `ch-run` runs. Debian specs are
bootstrapped with debootstrap (no registry; also a Docker archive for other sites), the others built
with `ch-image` from the generated Dockerfile; archives are unpacked layer by layer.
`debootstrap` is the same engine narrowed to Debian specs, named for what it does.

`ch-image` keeps its build cache under dlrun's cache (`CH_IMAGE_STORAGE`, unless the site set its own),
builds with `--force` (its workarounds for building unprivileged: without them `apt-get` in a Debian-based
RUN fails on setgroups), and takes registry references bare (`ch-image pull REPO:TAG`) with
registry architecture names. ch-image speaks only HTTPS; a registry on a loopback address is used
without verifying its certificate (`--tls-no-verify`), as Docker uses it.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from dlrun import paths
from dlrun.errors import DlrunError, UsageError
from dlrun.images import debootstrap, lock
from dlrun.images.archive import read_docker_archive, unpack_docker_archive
from dlrun.images.context import assemble, build_context
from dlrun.images.digest import tree_digest
from dlrun.images.engines.base import DigestMismatch, Engine, Log, Result, Target, mismatch
from dlrun.images.refs import REGISTRY, Location
from dlrun.images.spec import SpecFile, archive_path, artifact_dir, rootfs_path
from dlrun.images.steps import Command, Note, tools
from dlrun.registry import ENGINES, Tool

#: dlrun's architecture -> the registry's, as ch-image's --arch takes it (charliecloud.py's ARCH_MAP)
CH_ARCH = {"x86_64": "amd64", "ppc64le": "ppc64le", "aarch64": "arm64/v8"}


def tls_flags(reference: str) -> list[str]:
    """ch-image's flag for a loopback registry (HTTPS, its certificate not verified). After the subcommand: 0.31
    ignores it before (the subcommand's parser sets it again)."""
    from dlrun.images.oci_index import is_loopback, split_reference

    return ["--tls-no-verify"] if is_loopback(split_reference(reference)[0]) else []


def tls_env(reference: str) -> dict[str, str]:
    """With --tls-no-verify, the CA-bundle variables emptied: requests (ch-image's HTTP library) lets a set
    REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE turn verification back on for an unverified session."""
    return {"REQUESTS_CA_BUNDLE": "", "CURL_CA_BUNDLE": ""} if tls_flags(reference) else {}


def storage_env() -> dict[str, str]:
    """ch-image's storage (its build cache) under dlrun's cache, unless the site chose one."""
    if os.environ.get("CH_IMAGE_STORAGE"):
        return {}
    return {"CH_IMAGE_STORAGE": str(paths.cache_home() / "ch-image")}


@ENGINES.register("charliecloud")
class CharliecloudEngine(Engine):
    lock_field = "rootfs"
    what = "root filesystem"
    pushes_image = True
    pull_schemes = (REGISTRY, "docker")
    push_schemes = (REGISTRY, "docker")

    @property
    def tools(self) -> tuple[Tool, ...]:
        return tools("ch-run", "ch-image", "ch-convert", "debootstrap")

    def render_pull(self, location: Location) -> str:
        return location.registry_reference

    def render_push(self, location: Location) -> str:
        return location.registry_reference

    @staticmethod
    def tag(t: Target) -> str:
        return f"dlrun/{t.name}:{t.arch}"

    def run(self, steps: list[Any]) -> None:
        for value in storage_env().values():  # ch-image creates its storage directory, but not the parents
            Path(value).parent.mkdir(parents=True, exist_ok=True)
        super().run(steps)

    def build(self, t: Target, *, dry_run: bool = False, log: Log = print) -> Result:
        if t.spec_file.spec.debootstrap is not None:
            steps = debootstrap.planned_commands(t.spec_file, t.arch)
            if dry_run:
                return Result(steps)
            fields = debootstrap.build(t.spec_file, t.arch, log)
            return Result(steps, lock.record(t.name, t.arch, replace=True, **fields))
        context = build_context(t.spec_file, t.arch)
        rootfs = rootfs_path(t.name, t.arch)
        steps = [context.note(),
                 Command(["ch-image", "build", "--force", "-t", self.tag(t), "-f", context.recipe(t.arch, "docker"),
                          "."], cwd=str(context.path), env=storage_env()),
                 Command(["ch-convert", "-i", "ch-image", "-o", "dir", self.tag(t), str(rootfs)], env=storage_env())]
        if dry_run:
            return Result(steps)
        self.ensure_native(t, "ch-image")
        assemble(context)
        self._replace(rootfs)
        self.run(steps)
        entry = self.record(t, f"build ({self.name})", replace=True, rootfs=tree_digest(rootfs))
        return Result(steps, entry)

    def pull(self, t: Target, source: str, *, dry_run: bool = False, log: Log = print) -> Result:
        rootfs = rootfs_path(t.name, t.arch)
        reference = self.pull_from(source)

        def steps_for(ref: str) -> list[Any]:
            return [Command(["ch-image", "pull", *tls_flags(ref), f"--arch={CH_ARCH[t.arch]}", ref, self.tag(t)],
                            env={**storage_env(), **tls_env(ref)}),
                    Command(["ch-convert", "-i", "ch-image", "-o", "dir", self.tag(t), str(rootfs)], env=storage_env())]

        steps = steps_for(reference)
        if dry_run:
            return Result(steps)
        resolved = self.registry_image(t, reference)  # refused here, before a layer is downloaded
        steps = steps_for(resolved.manifest_reference)
        self._replace(rootfs)
        self.run(steps)
        digest = tree_digest(rootfs)
        self.check_against_lock(t, digest, f"{rootfs} (pulled from {source})")
        entry = self.record_registry(t, resolved, recorded_by=f"pull ({self.name}) {source}", rootfs=digest,
                                     digest=resolved.config)
        return Result(steps, entry)

    def push(self, t: Target, destination: str, *, dry_run: bool = False) -> Result:
        pushed, index_tag, index_step = self.push_steps(t, destination)
        rootfs = rootfs_path(t.name, t.arch)
        steps = [Command(["ch-image", "push", *tls_flags(pushed), "--image", str(rootfs), self.tag(t), pushed],
                         env={**storage_env(), **tls_env(pushed)}),
                 index_step]
        if dry_run:
            return Result(steps)
        if not (rootfs / "ch" / "metadata.json").is_file():
            # ch-image 0.31 asserts on an image without history (push.py, prepare): say so in one line instead
            raise UsageError(f"ch-image pushes only images it built or pulled (their history is in "
                             f"{rootfs}/ch/metadata.json, which this one lacks); valid: push it with --engine docker "
                             f"or podman after loading its archive (dlrun images load ... --engine podman)")
        self.verify(t)  # the root filesystem ch-run runs, verified, is what is pushed
        self.run(steps)
        # ch-image writes its own image config, so the registry's image ID is not the lock's (a Docker archive's)
        entry, message = self.publish(t, pushed, index_tag, same_id=False)
        return Result(steps, entry, [message])

    def save(self, t: Target, output: Path, *, dry_run: bool = False) -> Result:
        """The Docker archive a debootstrap build or a load left in the store (verified by its image ID)."""
        source = archive_path(t.name, t.arch)
        steps = [Command(["cp", str(source), str(output)])]
        if dry_run:
            return Result(steps)
        if not source.exists():
            raise DlrunError(f"{source} does not exist: only images built by dlrun (debootstrap) or loaded from "
                             "an archive have one; save from docker/podman instead")
        recorded = (lock.entry(t.name, t.arch) or {}).get("digest")
        actual = read_docker_archive(source).image_id
        if recorded != actual:
            raise mismatch(t.name, t.arch, "image ID", str(recorded), actual, str(source))
        self.run(steps)
        return Result(steps, lock.entry(t.name, t.arch), [f"saved {output}"])

    def load(self, t: Target, archive: Path, *, dry_run: bool = False, log: Log = print) -> Result:
        """Unpack a Docker archive's layers into the store (every layer's digest checked first)."""
        rootfs = rootfs_path(t.name, t.arch)
        steps = [Note(f"unpack {archive} layer by layer (digests checked first) into {rootfs}"),
                 Command(["cp", str(archive), str(archive_path(t.name, t.arch))])]
        if dry_run:
            return Result(steps)
        info = read_docker_archive(archive)
        self.check_against_lock(t, info.image_id, str(archive), "digest", "image ID")
        store = artifact_dir(t.name, t.arch)
        store.mkdir(parents=True, exist_ok=True)
        tmp = store / "rootfs.load"
        self._replace(tmp)
        unpack_docker_archive(archive, tmp)
        digest = tree_digest(tmp)
        try:
            self.check_against_lock(t, digest, f"{tmp} (unpacked from {archive})")
        except DigestMismatch:
            shutil.rmtree(tmp)
            raise
        self._replace(rootfs)
        tmp.rename(rootfs)
        if archive.resolve() != archive_path(t.name, t.arch).resolve():
            self.run(steps)
        recorded_by = (lock.entry(t.name, t.arch) or {}).get("recorded_by") or f"load ({self.name}) {archive.name}"
        entry = lock.record(t.name, t.arch, digest=info.image_id, rootfs=digest, layers=info.diff_ids,
                            recorded_by=recorded_by)
        return Result(steps, entry)

    def current_digest(self, t: Target) -> tuple[str, str]:
        rootfs = rootfs_path(t.name, t.arch)
        if not rootfs.is_dir():
            raise DlrunError(f"{rootfs} does not exist; build it (dlrun images build {t.name} --engine {self.name}) "
                             f"or load an archive (dlrun images load FILE --engine {self.name})")
        return tree_digest(rootfs), str(rootfs)

    def lock_extra(self, t: Target) -> dict[str, Any]:
        archive = archive_path(t.name, t.arch)
        return {"digest": read_docker_archive(archive).image_id} if archive.exists() else {}

    @staticmethod
    def _replace(path: Path) -> None:
        if path.exists():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)


@ENGINES.register("debootstrap")
class DebootstrapEngine(CharliecloudEngine):
    """Charliecloud's root filesystem, for Debian specs only: bootstrapped, no registry needed."""

    def target(self, spec_file: SpecFile, arch: str, host: str | None = None, expect: str | None = None) -> Target:
        if spec_file.spec.debootstrap is None:
            able = [name for name in ENGINES.names() if name != self.name]
            raise UsageError(f"image {spec_file.spec.name!r} has no `debootstrap:` section; only Debian images build "
                             f"with debootstrap. valid: --engine {'|'.join(able)}")
        return super().target(spec_file, arch, host, expect)
