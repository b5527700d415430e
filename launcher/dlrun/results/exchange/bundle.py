"""Results bundles: stored runs carried from one site to another in one file, checked by hash and signature.

A bundle is a POSIX tar archive compressed with gzip (`tar tzvf BUNDLE` lists it). Its members, in order:

  manifest.json       what the bundle is and holds: {"format": "dlrun-results-bundle", "format_version": 2,
                      "site" (the exporting site), "dlrun_version", "created_at" (the newest run's end),
                      "filters" (what the export selected), "runs" (how many), "with_logs",
                      "files": {member name: {"sha256", "size"}} for every other member}
  manifest.json.sig   only in a signed bundle: `ssh-keygen -Y sign -n dlrun-bundle` over manifest.json, so the
                      signature covers every other member through its hash
  runs.jsonl          one run per line, sorted by id: every column the store keeps, its comparability key,
                      plan, provenance, hardware fingerprint, quality verdict, result rows, and the node
                      inventory of its run directory (version 1, before fingerprints, has neither)
  logs/RUN-ID/PATH    with --with-logs: the regular files of each run directory, as they are

The same runs exported twice give the same bytes: members sorted, every member stamped with `created_at`,
owner 0, mode 0644, and a gzip header without a name or time. A new field or member means a new
`format_version`; a reader refuses versions it does not know instead of guessing.
"""
from __future__ import annotations

import calendar
import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlrun.errors import DlrunError
from dlrun.results.limits import DEFAULT, Limits, size_text
from dlrun.secrets.prints import PRINTS_NAME

FORMAT = "dlrun-results-bundle"
FORMAT_VERSION = 2
#: The versions a reader takes: 1 is 2 without the runs' fingerprint and quality.
READ_VERSIONS = (1, 2)
SIGNATURE_NAMESPACE = "dlrun-bundle"
MANIFEST = "manifest.json"
SIGNATURE = "manifest.json.sig"
RUNS = "runs.jsonl"
LOGS = "logs"

# What a reader accepts is the site's limits (dlrun.results.limits); a writer refuses a bundle beyond them.
MAX_SIGNATURE_BYTES = 64 << 10
MAX_PATH_DEPTH = 16                # directories below logs/RUN-ID/

#: Run ids become directory names at the importing site: no separators, no dot names, nothing odd.
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# One component of a path inside a run directory.
_COMPONENT = re.compile(r"^[A-Za-z0-9_+@=,%-][A-Za-z0-9._+@=,%-]{0,254}$|^\.[A-Za-z0-9_+@=,%-][A-Za-z0-9._+@=,%-]{0,253}$")


class BundleError(DlrunError):
    """A bundle that cannot be written, read or trusted, in one line. Exit 1 when the bundle fails a check
    (damaged, tampered, signed by a key the site does not allow); 2 when the command was wrong."""

    exit_code = 1


@dataclass(frozen=True)
class LogFile:
    """One file of a run directory as it travels: `name` is the member name, logs/RUN-ID/PATH."""

    name: str
    source: Path


@dataclass(frozen=True)
class Written:
    path: Path
    sha256: str
    size: int
    runs: int
    files: int
    signed: bool


def log_member(run_id: str, relative: str) -> str:
    return f"{LOGS}/{run_id}/{relative}"


def split_member(name: str) -> tuple[str, str] | None:
    """(run id, path inside its run directory) of a logs/ member name that is safe to write anywhere,
    else None: no absolute paths, no `..` or `.`, no empty parts, no characters a shell or a terminal
    would read as something else, at most MAX_PATH_DEPTH directories."""
    parts = name.split("/")
    if len(parts) < 3 or parts[0] != LOGS or not RUN_ID.fullmatch(parts[1]) or len(parts) > MAX_PATH_DEPTH + 3:
        return None
    if not all(_COMPONENT.fullmatch(part) for part in parts[2:]):
        return None
    return parts[1], "/".join(parts[2:])


def run_directory_files(run_id: str, run_dir: Path) -> list[LogFile]:
    """The regular files under a run directory, by name; links and special files stay behind, as do names a
    reader would refuse (a staging leftover is the only kind dlrun makes)."""
    out: list[LogFile] = []
    if not run_dir.is_dir():
        return out
    for root, dirs, files in os.walk(run_dir, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            path = Path(root) / name
            if path.is_symlink() or not path.is_file() or (root == str(run_dir) and name == PRINTS_NAME):
                continue  # a run's secret fingerprints stay with the site key they need
            member = log_member(run_id, path.relative_to(run_dir).as_posix())
            if split_member(member) is not None:
                out.append(LogFile(member, path))
    return out


def stamp_seconds(stamp: str | None) -> int:
    """A stored UTC time (2026-11-23T11:44:54Z) as seconds since 1970; 0 when it is not one."""
    try:
        return calendar.timegm(time.strptime(stamp or "", "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return 0


def canonical_line(record: Mapping[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _sha256_file(path: Path, limits: Limits) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
            if size > limits.log_member_bytes:
                raise BundleError(f"{path} is larger than a bundle carries ({size_text(limits.log_member_bytes)} a "
                                  "file, limits.log_member_bytes); export without --with-logs", exit_code=2)
    return digest.hexdigest(), size


def build_manifest(*, site: str, dlrun_version: str, filters: Mapping[str, Any], records: list[Mapping[str, Any]],
                   runs_bytes: bytes, logs: Iterable[tuple[LogFile, str, int]], with_logs: bool) -> dict[str, Any]:
    created = max((r.get("finished_at") or r.get("created_at") or "" for r in records), default="")
    files = {RUNS: {"sha256": hashlib.sha256(runs_bytes).hexdigest(), "size": len(runs_bytes)}}
    for log, digest, size in logs:
        files[log.name] = {"sha256": digest, "size": size}
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "site": site, "dlrun_version": dlrun_version,
            "created_at": created or None, "filters": dict(filters), "runs": len(records), "with_logs": with_logs,
            "files": dict(sorted(files.items()))}


def _member(name: str, size: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.type = size, mtime, 0o644, tarfile.REGTYPE
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_bundle(out: Path, records: list[dict[str, Any]], *, site: str, dlrun_version: str,
                 filters: Mapping[str, Any], logs: list[LogFile] | None = None,
                 sign=None, limits: Limits = DEFAULT) -> Written:
    """Write `records` (sorted here by id) and their run-directory files into the bundle `out`, atomically.

    `sign(manifest bytes) -> signature bytes` signs it (see bundle_sign.sign); None leaves it unsigned.
    A bundle beyond `limits` is refused: the site would not read it back."""
    records = sorted(records, key=lambda r: r["id"])
    for record in records:
        if not RUN_ID.fullmatch(str(record["id"])):
            raise BundleError(f"run id {record['id']!r} cannot travel in a bundle (valid: letters, digits, . _ -)",
                              exit_code=2)
    lines = [canonical_line(r) for r in records]
    runs_bytes = b"".join(lines)
    hashed = [(log, *_sha256_file(log.source, limits)) for log in sorted(logs or [], key=lambda item: item.name)]
    if 3 + len(hashed) > limits.bundle_members or len(runs_bytes) > limits.runs_bytes \
            or max(map(len, lines), default=0) > limits.run_line_bytes:
        raise BundleError(f"{len(records)} runs with {len(hashed)} files are more than one bundle carries "
                          "(limits in config.yaml); export fewer (filters, --since)", exit_code=2)
    manifest = build_manifest(site=site, dlrun_version=dlrun_version, filters=filters, records=records,
                              runs_bytes=runs_bytes, logs=hashed, with_logs=logs is not None)
    manifest_bytes = json.dumps(manifest, sort_keys=True, indent=1, ensure_ascii=True).encode() + b"\n"
    if len(manifest_bytes) > limits.manifest_bytes:
        raise BundleError(f"{len(hashed)} files make a manifest larger than {size_text(limits.manifest_bytes)} "
                          "(limits.manifest_bytes); export fewer runs or without --with-logs", exit_code=2)
    signature = sign(manifest_bytes) if sign is not None else None
    mtime = stamp_seconds(manifest["created_at"])

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as packed, \
                    tarfile.open(fileobj=packed, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                members = [(MANIFEST, manifest_bytes)] + ([(SIGNATURE, signature)] if signature else []) \
                    + [(RUNS, runs_bytes)]
                for name, data in members:
                    tar.addfile(_member(name, len(data), mtime), io.BytesIO(data))
                for log, digest, size in hashed:
                    data = log.source.read_bytes()
                    if len(data) != size or hashlib.sha256(data).hexdigest() != digest:
                        raise BundleError(f"{log.source} changed while it was exported; export again")
                    tar.addfile(_member(log.name, size, mtime), io.BytesIO(data))
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    digest, size = file_sha256(out), out.stat().st_size
    return Written(out, digest, size, len(records), len(hashed), signature is not None)
