"""Docker archives (`docker save` format): written for images built without an engine, read and
unpacked for Charliecloud. The image ID is sha256 of the config JSON, and the config lists each layer's
sha256 (diff_id), so an archive is verified against a lock entry before a single file is unpacked.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

from dlrun.errors import DlrunError


def canonical_json(data) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Layer:
    diff_id: str        # sha256:<hex> of the uncompressed layer tar
    path: Path | None   # a file holding the layer, or
    data: bytes | None = None  # the layer itself (small layers)

    @property
    def size(self) -> int:
        return len(self.data) if self.data is not None else self.path.stat().st_size  # type: ignore[union-attr]


def _add_bytes(out: tarfile.TarFile, name: str, data: bytes, mtime: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = mtime
    info.mode = 0o644
    out.addfile(info, io.BytesIO(data))


def write_docker_archive(target: Path, config: dict, layers: list[Layer], repo_tags: list[str], mtime: int) -> str:
    """Write `target` atomically; returns the image ID (`sha256:...`)."""
    config_bytes = canonical_json(config)
    image_id = hashlib.sha256(config_bytes).hexdigest()
    manifest = [{"Config": f"{image_id}.json", "RepoTags": repo_tags,
                 "Layers": [f"{layer.diff_id.split(':', 1)[1]}/layer.tar" for layer in layers]}]
    tmp = target.with_name(f".{target.name}.tmp")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as out:
            _add_bytes(out, "manifest.json", canonical_json(manifest), mtime)
            _add_bytes(out, f"{image_id}.json", config_bytes, mtime)
            for layer, name in zip(layers, manifest[0]["Layers"]):
                info = tarfile.TarInfo(name)
                info.size = layer.size
                info.mtime = mtime
                info.mode = 0o644
                if layer.data is not None:
                    out.addfile(info, io.BytesIO(layer.data))
                else:
                    with open(layer.path, "rb") as handle:  # type: ignore[arg-type]
                        out.addfile(info, handle)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return f"sha256:{image_id}"


@dataclass
class ArchiveInfo:
    image_id: str
    config: dict
    layers: list[str]       # member names of the layer tars, bottom first
    diff_ids: list[str]
    repo_tags: list[str]


def read_docker_archive(path: Path) -> ArchiveInfo:
    try:
        with tarfile.open(path) as archive:
            manifest = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
            if len(manifest) != 1:
                raise DlrunError(f"{path}: holds {len(manifest)} images; dlrun loads archives of one image")
            config_name = manifest[0]["Config"]
            config_bytes = archive.extractfile(config_name).read()  # type: ignore[union-attr]
    except (tarfile.TarError, KeyError, OSError, ValueError) as exc:
        raise DlrunError(f"{path} is not a Docker archive (docker save / dlrun images save): {exc}") from None
    config = json.loads(config_bytes)
    return ArchiveInfo(image_id="sha256:" + hashlib.sha256(config_bytes).hexdigest(), config=config,
                       layers=list(manifest[0]["Layers"]), diff_ids=list(config["rootfs"]["diff_ids"]),
                       repo_tags=list(manifest[0].get("RepoTags") or []))


def _safe_name(name: str) -> bool:
    parts = Path(name).parts
    return not name.startswith("/") and ".." not in parts


def unpack_docker_archive(path: Path, target: Path) -> ArchiveInfo:
    """Unpack the layers into `target` (a new directory) for Charliecloud. Every layer's sha256 is
    checked against the config before any file is written; whiteouts (`.wh.`) delete what they hide."""
    info = read_docker_archive(path)
    if len(info.layers) != len(info.diff_ids):
        raise DlrunError(f"{path}: {len(info.layers)} layers but the config lists {len(info.diff_ids)}")
    with tarfile.open(path) as archive:
        for member, diff_id in zip(info.layers, info.diff_ids):
            handle = archive.extractfile(member)
            if handle is None:
                raise DlrunError(f"{path}: layer {member} is missing")
            actual = "sha256:" + hashlib.file_digest(handle, "sha256").hexdigest()
            if actual != diff_id:
                raise DlrunError(f"{path}: layer {member} has digest {actual}, but the image config says {diff_id}; "
                                 "the archive is damaged or was altered", exit_code=1)
        if target.exists():
            raise DlrunError(f"{target} exists; remove it first")
        target.mkdir(parents=True)
        root = os.geteuid() == 0
        kwargs = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
        for member in info.layers:
            with tarfile.open(fileobj=archive.extractfile(member)) as layer:  # type: ignore[arg-type]
                # extractall sets directory modes last, so read-only directories can still be filled.
                layer.extractall(target, members=_layer_members(layer, target, path, member, root),
                                 numeric_owner=True, **kwargs)
    return info


def _layer_members(layer: tarfile.TarFile, target: Path, path: Path, member: str, root: bool):
    for entry in layer:
        if not _safe_name(entry.name):
            raise DlrunError(f"{path}: unsafe path {entry.name!r} in layer {member}")
        head, base = os.path.split(os.path.normpath(entry.name))
        if base == ".wh..wh..opq":
            opaque = target / head
            for child in opaque.iterdir() if opaque.is_dir() else []:
                _remove(child)
            continue
        if base.startswith(".wh."):
            _remove(target / head / base[len(".wh."):])
            continue
        if (entry.ischr() or entry.isblk()) and not root:
            continue  # device nodes: the runtime binds the host's /dev
        existing = target / os.path.normpath(entry.name)
        # Never write through what a lower layer left at this path (a symlink, or a file where a directory goes).
        if existing.is_symlink() or (existing.exists() and not (existing.is_dir() and entry.isdir())):
            _remove(existing)
        yield entry


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
