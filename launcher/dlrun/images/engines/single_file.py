"""Engines whose image is one file in the image store (a SIF, a squashfs): its digest is the file's sha256,
`save` hands on the file itself, and `load` of such a file copies it in after checking it against the lock."""
from __future__ import annotations

from pathlib import Path

from dlrun.errors import DlrunError
from dlrun.images.digest import file_sha256
from dlrun.images.engines.base import Engine, Result, Target
from dlrun.images.steps import Command


class SingleFileEngine(Engine):
    #: How to get the file when it is missing, for the error message.
    obtain_hint = "build, pull or load it first"

    @property
    def expect_field(self) -> str:  # type: ignore[override]
        """`--digest` names the file's sha256."""
        return self.lock_field

    def image_file(self, t: Target) -> Path:
        raise NotImplementedError

    def current_digest(self, t: Target) -> tuple[str, str]:
        path = self.image_file(t)
        if not path.is_file():
            raise DlrunError(f"{path} does not exist; {self.obtain_hint}")
        return file_sha256(path), str(path)

    def save(self, t: Target, output: Path, *, dry_run: bool = False) -> Result:
        steps = [Command(["cp", str(self.image_file(t)), str(output)])]
        if dry_run:
            return Result(steps)
        entry = self.verify(t).entry
        self.run(steps)
        return Result(steps, entry, [f"saved {output}"])

    def load_file(self, t: Target, archive: Path, *, dry_run: bool = False) -> Result:
        """Copy another site's file into the store, refused when its digest differs from the lock."""
        target = self.image_file(t)
        steps = [Command(["mkdir", "-p", str(target.parent)]), Command(["cp", str(archive), str(target)])]
        if dry_run:
            return Result(steps)
        digest = file_sha256(archive)
        self.check_against_lock(t, digest, str(archive))
        self.run(steps)
        return Result(steps, self.record(t, f"load ({self.name}) {archive.name}", size_bytes=target.stat().st_size,
                                         **{self.lock_field: digest}))
