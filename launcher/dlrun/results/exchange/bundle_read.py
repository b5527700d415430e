"""Reading a results bundle as untrusted input: every byte checked before anything is used, nothing read
into memory beyond the site's limits (dlrun.results.limits).

The archive is read once, as a stream: gzip is inflated here (bounded, and no data may follow the gzip
stream), every tar header is checked before tarfile acts on it (dlrun.results.exchange.bundle_stream), the stream
must start with manifest.json (and manifest.json.sig, if signed), and the signature policy is applied to the
manifest's bytes before anything else is parsed: nothing from an unverified bundle is even read as JSON
when the site requires signatures. Every later member must be a regular file that the manifest lists, with
the size and sha256 it lists, seen once. Links, devices, directories, unsafe names, a member the manifest
does not list, one it lists that is missing, and anything but (bounded) zero padding after the tar end are
refused with one line naming what is wrong. runs.jsonl is checked line by line as it streams and kept in
the staging directory; run-directory files are written only into that directory, under names checked by
`split_member`.
"""
from __future__ import annotations

import hashlib
import os
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dlrun.errors import UsageError
from dlrun.files import open_regular
from dlrun.results.exchange.bundle import (FORMAT, MANIFEST, READ_VERSIONS, MAX_SIGNATURE_BYTES, RUNS, SIGNATURE,
                                           BundleError, split_member)
from dlrun.results.exchange.bundle_records import RunsSpool, load_json
from dlrun.results.exchange.bundle_stream import CHUNK, Inflated, TarGuard
from dlrun.results.limits import DEFAULT, Limits, size_text
from dlrun.results.site import SITE_PATTERN
from dlrun.results.store.fields import check_stamp

#: The name runs.jsonl is kept under in the staging directory (a run id never starts with a dot).
SPOOLED_RUNS = ".runs.jsonl"


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

    @field_validator("created_at")
    @classmethod
    def _a_time(cls, value: str | None) -> str | None:
        return None if value is None else check_stamp("created_at", value)  # as every stored time


@dataclass
class ReadBundle:
    """A bundle whose every member matched its manifest: the manifest, its raw bytes and signature, who
    signed it (as the policy found), the runs of runs.jsonl (id -> the site it names, in file order) kept
    checked in `runs_path` under staging, and the run-directory files written there (run id -> paths)."""

    manifest: Manifest
    manifest_bytes: bytes
    signature: bytes | None
    sha256: str
    signer: Any = None
    runs: dict[str, str | None] = field(default_factory=dict)
    runs_path: Path | None = None
    logs: dict[str, list[str]] = field(default_factory=dict)


def parse_manifest(data: bytes, label: str, limits: Limits = DEFAULT) -> Manifest:
    raw = load_json(data, f"{label}: manifest.json", limits.bundle_members + 1000)
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
    if len(manifest.files) + 2 > limits.bundle_members:
        raise BundleError(f"{label}: manifest.json lists more than {limits.bundle_members:,} members "
                          "(limits.bundle_members)")
    return manifest


def _accept(*_: Any) -> None:
    return None


def read_bundle(path: Path, *, staging: Path | None = None,
                check_signature: Callable[[bytes, bytes | None], Any] = _accept,
                admit: Callable[[Manifest, Any], None] = _accept, limits: Limits | None = None) -> ReadBundle:
    """Read and verify the bundle at `path` into `staging`. `check_signature(manifest bytes, signature or
    None)` applies the signature policy before anything else is parsed; what it returns is kept as `signer`.
    `admit(manifest, signer)` then decides whether that signer may speak for what the manifest claims."""
    path = Path(path)
    label = f"bundle {str(path)!r}"
    try:
        handle, _ = open_regular(path, "bundle")  # a FIFO or a device would block or never end
    except UsageError as exc:
        raise BundleError(str(exc), exit_code=2) from None
    with handle:
        reader = _Reader(handle, label, staging, limits or DEFAULT)
        try:
            return reader.read(check_signature, admit)
        except (tarfile.TarError, EOFError) as exc:
            raise BundleError(f"{label}: not a tar archive, or damaged ({exc or 'unexpected end'})") from None
        except OSError as exc:
            raise BundleError(f"{label}: cannot be read: {exc.strerror or exc}") from None
        finally:
            reader.close()


class _Reader:
    """One pass over a bundle's members (see the module notes)."""

    def __init__(self, handle, label: str, staging: Path | None, limits: Limits):
        self.label, self.staging, self.limits = label, staging, limits
        self.stream = Inflated(handle, limits.bundle_bytes, label)
        largest = max(limits.manifest_bytes, MAX_SIGNATURE_BYTES, limits.runs_bytes, limits.log_member_bytes)
        self.guard = TarGuard(self.stream, limits, largest, label)
        self.manifest: Manifest | None = None
        self.manifest_bytes: bytes | None = None
        self.signature: bytes | None = None
        self.signer: Any = None
        self.spool: RunsSpool | None = None
        self.seen: set[str] = set()
        self.logs: dict[str, list[str]] = {}

    def close(self) -> None:
        if self.spool is not None:
            self.spool.abort()

    def read(self, check_signature, admit) -> ReadBundle:
        tar = tarfile.open(fileobj=self.guard, mode="r|")
        count = 0
        while (info := tar.next()) is not None:
            tar.members.clear()  # a stream is read once: tarfile need not keep every header it saw
            self._member(tar, info, count, check_signature, admit)
            count += 1
        if self.manifest_bytes is None:
            raise BundleError(f"{self.label}: empty archive, no manifest.json")
        if self.manifest is None:  # nothing but the manifest (and signature): what it lists is missing
            self._verify(check_signature, admit)
        assert self.manifest is not None
        missing = sorted(set(self.manifest.files) - self.seen)
        if missing:
            raise BundleError(f"{self.label}: member {missing[0]!r} listed in the manifest is missing"
                              + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
        assert self.spool is not None
        self.spool.close()
        strays = sorted(set(self.logs) - set(self.spool.sites))
        if strays:
            raise BundleError(f"{self.label}: logs/{strays[0]}/ belongs to no run in runs.jsonl")
        while self.guard.read(CHUNK):  # tar pads its end with zeros (checked, and bounded, by the guard)
            pass
        return ReadBundle(self.manifest, self.manifest_bytes, self.signature, self.stream.raw_sha256.hexdigest(),
                          self.signer, self.spool.sites, self.spool.path, self.logs)

    def _verify(self, check_signature, admit) -> None:
        """The signature policy over the manifest's bytes first; only then are they parsed."""
        assert self.manifest_bytes is not None
        self.signer = check_signature(self.manifest_bytes, self.signature)
        self.manifest = parse_manifest(self.manifest_bytes, self.label, self.limits)
        admit(self.manifest, self.signer)

    def _member(self, tar: tarfile.TarFile, info: tarfile.TarInfo, count: int, check_signature, admit) -> None:
        label = self.label
        if not info.isreg():
            raise BundleError(f"{label}: member {info.name!r} is not a regular file (links, devices and "
                              "directories are refused)")
        if info.name in self.seen:
            raise BundleError(f"{label}: member {info.name!r} appears twice")
        self.seen.add(info.name)
        if count == 0:
            if info.name != MANIFEST:
                raise BundleError(f"{label}: the first member is {info.name!r}, not manifest.json")
            self.manifest_bytes = self._bytes(tar, info, self.limits.manifest_bytes, "limits.manifest_bytes")
            return
        if count == 1 and info.name == SIGNATURE:
            self.signature = self._bytes(tar, info, MAX_SIGNATURE_BYTES, "signatures are small")
            return
        if self.manifest is None:  # the policy decides before a single listed member is read
            self._verify(check_signature, admit)
        assert self.manifest is not None
        entry = self.manifest.files.get(info.name)
        if entry is None:
            raise BundleError(f"{label}: member {info.name!r} is not listed in the manifest")
        if info.size != entry.size:
            raise BundleError(f"{label}: member {info.name!r} is {info.size} bytes; the manifest says {entry.size}")
        if info.name == RUNS:
            self._check_size(info, self.limits.runs_bytes, "limits.runs_bytes")
            digest = self._copy(tar, info, self._spool().feed)
        else:
            self._check_size(info, self.limits.log_member_bytes, "limits.log_member_bytes")
            digest = self._stage(tar, info)
            run_id, relative = split_member(info.name)  # type: ignore[misc]
            self.logs.setdefault(run_id, []).append(relative)
        if digest != entry.sha256:
            raise BundleError(f"{label}: member {info.name!r} does not match its sha256 in the manifest "
                              "(damaged or tampered)")

    def _check_size(self, info: tarfile.TarInfo, limit: int, why: str) -> None:
        if info.size > limit:
            raise BundleError(f"{self.label}: member {info.name!r} is {info.size:,} bytes, more than a bundle "
                              f"carries ({size_text(limit)}, {why})")

    def _bytes(self, tar: tarfile.TarFile, info: tarfile.TarInfo, limit: int, why: str) -> bytes:
        self._check_size(info, limit, why)
        parts: list[bytes] = []
        self._copy(tar, info, parts.append)
        return b"".join(parts)

    def _spool(self) -> RunsSpool:
        assert self.manifest is not None
        self.spool = RunsSpool(self.staging / SPOOLED_RUNS if self.staging is not None else None, self.limits,
                               self.manifest.runs)
        return self.spool

    def _copy(self, tar: tarfile.TarFile, info: tarfile.TarInfo, sink: Callable[[bytes], Any]) -> str:
        """Hand a member's bytes to `sink` in chunks; their sha256."""
        handle = tar.extractfile(info)
        digest = hashlib.sha256()
        size = 0
        while handle is not None and (chunk := handle.read(CHUNK)):
            size += len(chunk)
            digest.update(chunk)
            sink(chunk)
        if size != info.size:
            raise BundleError(f"{self.label}: member {info.name!r} is truncated")
        return digest.hexdigest()

    def _stage(self, tar: tarfile.TarFile, info: tarfile.TarInfo) -> str:
        """Copy a logs/ member into staging (or only hash it when there is none); its sha256."""
        if self.staging is None:
            return self._copy(tar, info, lambda chunk: None)
        run_id, relative = split_member(info.name)  # type: ignore[misc]  # checked against the manifest
        target = self.staging / run_id / relative
        try:
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            out = os.fdopen(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb")
        except OSError as exc:
            raise BundleError(f"{self.label}: member {info.name!r} cannot be placed: {exc.strerror}") from None
        with out:
            return self._copy(tar, info, out.write)
