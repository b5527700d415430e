"""`singularity` and `apptainer`: their CLIs, one SIF file per image and architecture in the image store.
Both pull from `docker://`, `oras://`, `library://`, `shub://` and `http(s)://` (their `pull --help`), and
push to `oras://` and `library://`; a bare registry reference gets `docker://` in front.
"""
from __future__ import annotations

import os
from pathlib import Path

from dlrun.images.context import assemble, build_context
from dlrun.images.digest import file_sha256
from dlrun.images.engines.base import Log, Result, Target
from dlrun.images.engines.single_file import SingleFileEngine
from dlrun.images.refs import REGISTRY, Location
from dlrun.images.spec import sif_path
from dlrun.images.steps import Command, require_tool, tools
from dlrun.registry import ENGINES, Tool


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

    def build(self, t: Target, *, dry_run: bool = False, log: Log = print) -> Result:
        context = build_context(t.spec_file, t.arch)
        sif = sif_path(t.name, t.arch)
        fakeroot = [] if os.geteuid() == 0 else ["--fakeroot"]
        steps = [context.note(), Command(["mkdir", "-p", str(sif.parent)]),
                 Command([self.name, "build", *fakeroot, str(sif), context.recipe(t.arch, "singularity")],
                         cwd=str(context.path))]
        if dry_run:
            return Result(steps)
        self.ensure_native(t, self.name)
        require_tool(self.name)
        assemble(context)
        self.run(steps)
        entry = self.record(t, f"build ({self.name})", replace=True, sif=file_sha256(sif),
                            size_bytes=sif.stat().st_size)
        return Result(steps, entry)

    def pull(self, t: Target, source: str, *, dry_run: bool = False, log: Log = print) -> Result:
        sif = sif_path(t.name, t.arch)
        steps = [Command(["mkdir", "-p", str(sif.parent)]),
                 Command([self.name, "pull", "--force", str(sif), self.pull_from(source)])]
        if dry_run:
            return Result(steps)
        require_tool(self.name)
        self.run(steps)
        digest = file_sha256(sif)
        self.check_against_lock(t, digest, f"{sif} (pulled from {source})")
        entry = self.record(t, f"pull ({self.name}) {source}", sif=digest)
        return Result(steps, entry)

    def push(self, t: Target, destination: str, *, dry_run: bool = False) -> Result:
        steps = [Command([self.name, "push", str(sif_path(t.name, t.arch)), self.push_to(destination)])]
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
