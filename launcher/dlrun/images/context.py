"""The directory Docker, Podman, Singularity and Charliecloud build an image from, assembled from the
installed dlrun.

The generated recipes copy the harness from `launcher/dlrun/harness/<file>`, relative to the build
context: the repository's layout, so a site can build from a checkout with no dlrun installed. dlrun
itself never builds from its source tree or from site-packages (a wheel has no such layout, and a build
context would send the whole tree to the engine): it copies the image's recipes (from the spec's folder)
and the harness files the spec lists (from the installed package) into a directory under the cache, at
exactly those paths. The directory is named by a digest of what it holds, so a second build reuses it and
a changed harness gets a new one.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from dlrun import paths
from dlrun.errors import DlrunError
from dlrun.images.recipes import FORMATS, HARNESS_SRC, recipe_name
from dlrun.images.spec import SpecFile
from dlrun.images.steps import Note


@dataclass(frozen=True)
class BuildContext:
    path: Path               #: where the context is (or will be) assembled
    files: dict[str, Path]   #: path inside the context -> the installed file it is a copy of
    spec_file: SpecFile

    def recipe(self, arch: str, fmt: str) -> str:
        """The recipe's path relative to the context (what `-f` or the definition argument names)."""
        return f"containers/{self.spec_file.folder.name}/{recipe_name(arch, fmt)}"

    def note(self) -> Note:
        return Note(f"assemble the build context {self.path} from the installed dlrun: " + ", ".join(sorted(self.files)))


def _sources(spec_file: SpecFile, arch: str) -> dict[str, Path]:
    folder = f"containers/{spec_file.folder.name}"
    files = {f"{folder}/{recipe_name(arch, fmt)}": spec_file.folder / recipe_name(arch, fmt) for fmt in FORMATS}
    for name in spec_file.spec.harness.files:
        files[f"{HARNESS_SRC}/{name}"] = paths.HARNESS_DIR / name
    for inside, source in files.items():
        if not source.is_file():
            what = ("render it: dlrun images render " + spec_file.spec.name if inside.startswith("containers/")
                    else f"the spec lists harness file {inside.rsplit('/', 1)[-1]!r}, which dlrun does not ship")
            raise DlrunError(f"{source} does not exist; {what}")
    return files


def build_context(spec_file: SpecFile, arch: str) -> BuildContext:
    """Where the context for (image, arch) is, from the content of its files; writes nothing."""
    files = _sources(spec_file, arch)
    digest = hashlib.sha256()
    for inside in sorted(files):
        digest.update(f"{inside}\0{hashlib.sha256(files[inside].read_bytes()).hexdigest()}\n".encode())
    name = f"{spec_file.spec.name}-{arch}-{digest.hexdigest()[:16]}"
    return BuildContext(paths.cache_home() / "build-contexts" / name, files, spec_file)


def assemble(context: BuildContext) -> Path:
    """Write the context (once: an existing one holds the same files, its name says so); return its path."""
    if context.path.is_dir():
        return context.path
    tmp = context.path.with_name(f".{context.path.name}.{os.getpid()}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    for inside, source in context.files.items():
        target = tmp / inside
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    try:
        tmp.rename(context.path)
    except OSError:  # another build assembled the same context first
        shutil.rmtree(tmp)
        if not context.path.is_dir():
            raise
    return context.path
