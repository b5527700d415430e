"""The site's image lock: the content digests of the images this site built, pulled or loaded.

Site state, not published data: builds from the committed recipes are not bit-reproducible (package
mirrors and base tags move, build tools stamp times), so each site records what it has and hands the
entry on with the image. It lives at `$DLRUN_HOME/images.lock` (`$DLRUN_IMAGES_LOCK` points elsewhere).

One entry per image and architecture:
  digest        image ID: sha256 of the image config, which lists the content digest of every layer.
                Docker and Podman report the same ID for the same image, before and after save/load,
                push/pull. This is the digest runs record.
  rootfs        dlrun's digest of the unpacked root filesystem (Charliecloud; see digest.tree_digest)
  sif           sha256 of the Singularity/Apptainer image file
  sif_from      what the SIF was built from: its definition file, or the image ID of the Docker archive
  squashfs      sha256 of enroot's squashfs image file (what pyxis runs)
  repo_digests  registry references by manifest digest (this architecture's image), after a push or pull
  index_digests registry references by the digest of the OCI image index (one tag for every architecture)
                that holds this architecture's manifest, after a push or a pull through it
The file is YAML with sorted keys, written atomically under a file lock.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from dlrun import paths
from dlrun.errors import DlrunError
from dlrun.files import write_atomic
from dlrun.yamlfile import load_yaml

HEADER = """\
# Content digests of the dlrun reference images this site built, pulled or loaded, per architecture.
# Written by `dlrun images build|pull|load|lock`; `dlrun images verify` and every run compare against it.
# digest: image ID (sha256 of the image config; the same in Docker and Podman, across save/load/push/pull)
# rootfs: digest of the unpacked root filesystem (Charliecloud);  sif: sha256 of the SIF file;
# squashfs: sha256 of enroot's squashfs file.  repo_digests: REPO@sha256 of this architecture's manifest;
# index_digests: REPO@sha256 of the image index (one tag for every architecture) that holds it.
# built_emulated_on: the machine's architecture where another one's image was built under qemu emulation.
"""
FIELDS = ("digest", "rootfs", "sif", "squashfs", "repo_digests", "index_digests", "layers", "spec_sha256",
          "recorded_by", "recorded_at", "size_bytes", "packages", "harness_sha256", "sif_from", "built_emulated_on")


def lock_path() -> Path:
    if os.environ.get("DLRUN_IMAGES_LOCK"):
        return Path(os.environ["DLRUN_IMAGES_LOCK"])
    return paths.dlrun_home() / "images.lock"


def read_lock(path: Path | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    path = path or lock_path()
    if not path.exists():
        return {}
    data = load_yaml(path, "the image lock") or {}  # bounded; a bad file is one line naming it
    if not isinstance(data, dict):
        raise DlrunError(f"{path}: holds {type(data).__name__}, not `version` and `images`", exit_code=2)
    images = data.get("images") or {}
    if not isinstance(images, dict):
        raise DlrunError(f"{path}: `images` must be a mapping of image -> architecture -> entry", exit_code=2)
    return images


def entry(name: str, arch: str, path: Path | None = None) -> dict[str, Any] | None:
    return (read_lock(path).get(name) or {}).get(arch)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.flock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def render_lock(images: dict[str, dict[str, dict[str, Any]]]) -> str:
    body = yaml.safe_dump({"version": 1, "images": images}, sort_keys=True, default_flow_style=False, width=120)
    return HEADER + body


def record(name: str, arch: str, *, path: Path | None = None, replace: bool = False, **fields: Any) -> dict[str, Any]:
    """Merge `fields` into the entry of (name, arch) and write the lock; returns the new entry."""
    path = path or lock_path()
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown lock fields: {sorted(unknown)}")
    with _locked(path):
        images = read_lock(path)
        current = {} if replace else dict((images.get(name) or {}).get(arch) or {})
        current.update({k: v for k, v in fields.items() if v is not None})
        current["recorded_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        images.setdefault(name, {})[arch] = current
        write_atomic(path, render_lock(images))
    return current

