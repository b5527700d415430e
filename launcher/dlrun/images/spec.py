"""Finding image specs (`containers/<tag>/image.yaml`) and choosing the architecture to work on."""
from __future__ import annotations

import hashlib
import os
import platform
from dataclasses import dataclass
from pathlib import Path

from dlrun import paths
from dlrun.catalog.loader import load_file, search_dirs
from dlrun.catalog.stack import PinnedImageSpec
from dlrun.errors import UsageError, unknown_name
from dlrun.harness.harness_node import ARCHES



@dataclass(frozen=True)
class SpecFile:
    spec: PinnedImageSpec
    path: Path  # .../containers/<tag>/image.yaml

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def display_path(self) -> str:
        """`containers/<tag>/image.yaml`, relative to its catalog directory (the repository or a site's)."""
        return f"containers/{self.path.parent.name}/image.yaml"

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def spec_files() -> dict[str, SpecFile]:
    """Every `containers/*/image.yaml` on the search path; later directories override earlier ones."""
    from dlrun.catalog.loader import CatalogError

    found: dict[str, SpecFile] = {}
    for base in search_dirs():
        for path in sorted((base / "containers").glob("*/image.yaml")):
            for spec in load_file(PinnedImageSpec, path):
                if spec.name != path.parent.name:
                    raise CatalogError(f"{path}:1: name: {spec.name!r} must match its folder "
                                       f"{path.parent.name!r} (one folder per image tag)")
                found[spec.name] = SpecFile(spec, path)
    return found


def get_spec(name: str) -> SpecFile:
    files = spec_files()
    if name not in files:
        raise unknown_name("image", name, files)
    return files[name]


def host_arch() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64", "ppc64el": "ppc64le"}.get(machine, machine)


def choose_arch(spec: PinnedImageSpec, arch: str | None = None, system: str | None = None) -> str:
    """The architecture to build/pull/verify: given, the system's, this machine's, or the only one."""
    where = ""
    if system is not None:
        from dlrun.catalog import load_catalog
        from dlrun.probe.host import probe_host

        sys_ = load_catalog(host=probe_host()).system(system)
        if arch is not None and arch != sys_.arch:
            raise UsageError(f"--arch {arch} contradicts system {system!r}, which is {sys_.arch}")
        arch, where = sys_.arch, f" (system {system!r})"
    if arch is not None:
        if arch not in ARCHES:
            raise unknown_name("architecture", arch, ARCHES)
        if arch not in spec.arch:
            raise UsageError(f"image {spec.name!r} is built for {', '.join(spec.arch)}, not {arch}{where}; "
                             f"valid: {', '.join(spec.arch)}")
        return arch
    here = host_arch()
    if here in spec.arch:
        return here
    if len(spec.arch) == 1:
        return spec.arch[0]
    raise UsageError(f"image {spec.name!r} is built for {', '.join(spec.arch)}; choose one with --arch")


def images_dir() -> Path:
    """This machine's image store (site state): root filesystems, Docker archives, SIF and squashfs files."""
    if os.environ.get("DLRUN_IMAGES_DIR"):
        return Path(os.environ["DLRUN_IMAGES_DIR"])
    return paths.dlrun_home() / "images"


def artifact_dir(name: str, arch: str) -> Path:
    return images_dir() / name / arch


def rootfs_path(name: str, arch: str) -> Path:
    return artifact_dir(name, arch) / "rootfs"


def archive_path(name: str, arch: str) -> Path:
    return artifact_dir(name, arch) / "image.tar"


def sif_path(name: str, arch: str) -> Path:
    return artifact_dir(name, arch) / f"{name}.sif"


def squashfs_path(name: str, arch: str) -> Path:
    """enroot's image file (what `enroot import` writes and pyxis `--container-image` runs)."""
    return artifact_dir(name, arch) / f"{name}.sqsh"
