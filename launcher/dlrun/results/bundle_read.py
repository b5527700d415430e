"""Reading a results bundle as untrusted input: every byte checked before anything is used.

The archive is read once, as a stream: gzip is inflated here (bounded, and no data may follow the gzip
stream), the tar stream must start with manifest.json (and manifest.json.sig, if signed), the signature
policy is applied to the manifest before any other member is read, and every later member must be a
regular file that the manifest lists, with the size and sha256 it lists, seen once. Links, devices,
directories, unsafe names, a member the manifest does not list, one it lists that is missing, and anything
but zero padding after the tar end are refused with one line naming what is wrong. Run-directory files are
written only into the staging directory the caller gives, under names checked by `split_member`.
"""
from __future__ import annotations

import hashlib
import json
import os
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dlrun.results.bundle import (FORMAT, MANIFEST, READ_VERSIONS, MAX_LOG_BYTES, MAX_MANIFEST_BYTES, MAX_MEMBERS,
                                  MAX_RUNS_BYTES, MAX_SIGNATURE_BYTES, MAX_TOTAL_BYTES, RUNS, SIGNATURE, BundleError,
                                  split_member)
from dlrun.results.site import SITE_PATTERN

_CHUNK = 1 << 20


class FileEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    format: Literal["dlrun-results-bundle"]
    format_version: Literal[1, 2]
    site: str = Field(pattern=SITE_PATTERN.pattern)
    dlrun_version: str = Field(max_length=100)
    created_at: str | None
    filters: dict[str, Any]
    runs: int = Field(ge=0)
    with_logs: bool
    files: dict[str, FileEntry]


@dataclass
class ReadBundle:
    """A bundle whose every member matched its manifest: the manifest, its raw bytes and signature, the
    runs.jsonl bytes, and the run-directory files written to staging (run id -> relative paths)."""

    manifest: Manifest
    manifest_bytes: bytes
    signature: bytes | None
    runs_bytes: bytes
    sha256: str
    signer: Any = None
    logs: dict[str, list[str]] = field(default_factory=dict)


class _Inflated:
    """The gunzipped bytes of a file, read on demand; refuses more than `limit` bytes, damage, and anything
    after the end of the gzip stream."""

    def __init__(self, handle, limit: int, label: str):
        self._handle, self._limit, self._label = handle, limit, label
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._buffer = bytearray()  # deleting from its front is cheap: tarfile reads it 10 KiB at a time
        self._total = 0
        self._done = False
        self.raw_sha256 = hashlib.sha256()  # of the file's bytes as read: the bundle's identity

    def _raw(self, size: int) -> bytes:
        data = self._handle.read(size)
        self.raw_sha256.update(data)
        return data

    def _fill(self, want: int) -> None:
        while len(self._buffer) < want and not self._done:
            if self._inflate.eof:
                if self._inflate.unused_data or self._raw(1):
                    raise BundleError(f"{self._label}: data after the end of the compressed archive")
                self._done = True
                break
            source = self._inflate.unconsumed_tail or self._raw(_CHUNK)
            if not source:
                raise BundleError(f"{self._label}: the archive is truncated")
            try:
                data = self._inflate.decompress(source, _CHUNK)
            except zlib.error as exc:
                raise BundleError(f"{self._label}: not a gzip-compressed bundle, or damaged ({exc})") from None
            self._total += len(data)
            if self._total > self._limit:
                raise BundleError(f"{self._label}: more than {_bytes(self._limit)} uncompressed; refused")
            self._buffer += data

    def read(self, size: int) -> bytes:
        self._fill(size)
        out = bytes(self._buffer[:size])
        del self._buffer[:size]
        return out


def _bytes(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 else f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} bytes"


def parse_manifest(data: bytes, label: str) -> Manifest:
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError):
        raise BundleError(f"{label}: manifest.json is not JSON") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise BundleError(f"{label}: manifest.json does not describe a dlrun results bundle")
    version = raw.get("format_version")
    if version not in READ_VERSIONS or isinstance(version, bool):
        raise BundleError(f"{label}: bundle format version {version!r} is not one this dlrun reads "
                          f"(valid: {', '.join(map(str, READ_VERSIONS))}); upgrade dlrun", exit_code=2)
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BundleError(f"{label}: manifest.json field {where}: {first['msg']}") from None
    for name in manifest.files:
        if name != RUNS and split_member(name) is None:
            raise BundleError(f"{label}: manifest.json lists an unsafe member name {name!r}")
    if RUNS not in manifest.files:
        raise BundleError(f"{label}: manifest.json does not list runs.jsonl")
    if len(manifest.files) + 2 > MAX_MEMBERS:
        raise BundleError(f"{label}: manifest.json lists more than {MAX_MEMBERS} members")
    return manifest


def _read_member(tar: tarfile.TarFile, info: tarfile.TarInfo, limit: int, label: str) -> bytes:
    if info.size > limit:
        raise BundleError(f"{label}: member {info.name!r} is {info.size} bytes, more than a bundle carries")
    handle = tar.extractfile(info)
    data = handle.read() if handle is not None else b""
    if len(data) != info.size:
        raise BundleError(f"{label}: member {info.name!r} is truncated")
    return data


def _stage(tar: tarfile.TarFile, info: tarfile.TarInfo, staging: Path | None, label: str) -> str:
    """Copy a logs/ member into staging (or only hash it when there is none); its sha256."""
    handle = tar.extractfile(info)
    digest = hashlib.sha256()
    out = None
    if staging is not None:
        run_id, relative = split_member(info.name)  # type: ignore[misc]  # checked against the manifest
        target = staging / run_id / relative
        try:
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            out = os.fdopen(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb")
        except OSError as exc:
            raise BundleError(f"{label}: member {info.name!r} cannot be placed: {exc.strerror}") from None
    size = 0
    try:
        while handle is not None:
            chunk = handle.read(_CHUNK)
            if not chunk:
                break
            size += len(chunk)
            digest.update(chunk)
            if out is not None:
                out.write(chunk)
    finally:
        if out is not None:
            out.close()
    if size != info.size:
        raise BundleError(f"{label}: member {info.name!r} is truncated")
    return digest.hexdigest()


def read_bundle(path: Path, *, staging: Path | None = None,
                check_signature: Callable[[Manifest, bytes, bytes | None], Any] = lambda *_: None) -> ReadBundle:
    """Read and verify the bundle at `path`. `check_signature(manifest, manifest bytes, signature or None)`
    applies the signature policy before any other member is read; what it returns is kept as `signer`."""
    path = Path(path)
    label = f"bundle {str(path)!r}"
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise BundleError(f"cannot read {label}: {exc.strerror}", exit_code=2) from None
    with handle:
        try:
            return _read(handle, path, label, staging, check_signature)
        except (tarfile.TarError, EOFError) as exc:
            raise BundleError(f"{label}: not a tar archive, or damaged ({exc or 'unexpected end'})") from None
        except OSError as exc:
            raise BundleError(f"{label}: cannot be read: {exc.strerror or exc}") from None


def _read(handle, path: Path, label: str, staging: Path | None, check_signature) -> ReadBundle:
    stream = _Inflated(handle, MAX_TOTAL_BYTES, label)
    tar = tarfile.open(fileobj=stream, mode="r|")
    manifest = manifest_bytes = signature = runs_bytes = None
    signer, checked = None, False
    seen: set[str] = set()
    logs: dict[str, list[str]] = {}
    for count, info in enumerate(tar):
        if count >= MAX_MEMBERS:
            raise BundleError(f"{label}: more than {MAX_MEMBERS} members")
        if not info.isreg():
            raise BundleError(f"{label}: member {info.name!r} is not a regular file (links, devices and "
                              "directories are refused)")
        if info.name in seen:
            raise BundleError(f"{label}: member {info.name!r} appears twice")
        seen.add(info.name)
        if manifest is None:
            if info.name != MANIFEST:
                raise BundleError(f"{label}: the first member is {info.name!r}, not manifest.json")
            manifest_bytes = _read_member(tar, info, MAX_MANIFEST_BYTES, label)
            manifest = parse_manifest(manifest_bytes, label)
            continue
        if info.name == SIGNATURE and count == 1:
            signature = _read_member(tar, info, MAX_SIGNATURE_BYTES, label)
            continue
        if not checked:  # the policy decides before a single listed member is read
            signer, checked = check_signature(manifest, manifest_bytes, signature), True
        entry = manifest.files.get(info.name)
        if entry is None:
            raise BundleError(f"{label}: member {info.name!r} is not listed in the manifest")
        if info.size != entry.size:
            raise BundleError(f"{label}: member {info.name!r} is {info.size} bytes; the manifest says {entry.size}")
        if info.name == RUNS:
            runs_bytes = _read_member(tar, info, MAX_RUNS_BYTES, label)
            digest = hashlib.sha256(runs_bytes).hexdigest()
        else:
            if info.size > MAX_LOG_BYTES:
                raise BundleError(f"{label}: member {info.name!r} is larger than a bundle carries")
            digest = _stage(tar, info, staging, label)
            run_id, relative = split_member(info.name)  # type: ignore[misc]
            logs.setdefault(run_id, []).append(relative)
        if digest != entry.sha256:
            raise BundleError(f"{label}: member {info.name!r} does not match its sha256 in the manifest "
                              "(damaged or tampered)")
    if manifest is None:
        raise BundleError(f"{label}: empty archive, no manifest.json")
    if not checked:  # nothing but the manifest (and signature): the members it lists are missing
        signer = check_signature(manifest, manifest_bytes, signature)
    missing = sorted(set(manifest.files) - seen)
    if missing:
        raise BundleError(f"{label}: member {missing[0]!r} listed in the manifest is missing"
                          + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    while chunk := stream.read(_CHUNK):  # tar pads its end with zeros; anything else was added
        if chunk.strip(b"\0"):
            raise BundleError(f"{label}: data after the end of the archive")
    return ReadBundle(manifest, manifest_bytes, signature, runs_bytes or b"", stream.raw_sha256.hexdigest(), signer,
                      logs)
