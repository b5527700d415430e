"""`dlrun images build|pull|push|save|load|verify|lock`: find the image spec, the architecture and the
engine (`dlrun.registry.ENGINES`), and hand the operation to the engine (dlrun.images.engines)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from dlrun.errors import UsageError
from dlrun.images import lock
from dlrun.images.engines.base import Engine, Log, Result, Target
from dlrun.images.spec import choose_arch, get_spec
from dlrun.registry import ENGINES

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def resolve(name: str, engine: str, arch: str | None = None, system: str | None = None,
            host: str | None = None, expect: str | None = None) -> tuple[Engine, Target]:
    """The engine and the image it works on; unknown names and unsupported architectures are usage errors."""
    ENGINES.check(engine)
    spec_file = get_spec(name)
    chosen = ENGINES.get(engine)
    if expect is not None and not DIGEST.match(expect):
        raise UsageError(f"--digest {expect!r} is not a digest; valid: sha256: and 64 hex digits (the image ID "
                         "another site's images.lock records as `digest`)")
    return chosen, chosen.target(spec_file, choose_arch(spec_file.spec, arch, system), host, expect)


@dataclass(frozen=True)
class Expected:
    """What another site's lock entry says of an image: the digest to insist on, and where it was pushed."""

    digest: str | None
    source: str | None


def expected(name: str, engine: str, arch: str | None, system: str | None, digest: str | None,
             lock_from: Path | None) -> Expected:
    """`--digest`, or what the lock file `--lock-from` (another site's images.lock) records for this image and
    architecture: the engine's `expect_field`, and its registry reference by manifest digest."""
    if lock_from is None:
        return Expected(digest, None)
    if not lock_from.is_file():
        raise UsageError(f"--lock-from {str(lock_from)!r} is not a file; valid: another site's images.lock")
    chosen, target = resolve(name, engine, arch, system)
    entry = lock.entry(name, target.arch, path=lock_from)
    if not entry:
        raise UsageError(f"{lock_from} has no entry for image {name} ({target.arch}); valid: an images.lock that "
                         f"records it (dlrun images show {name} at that site)")
    field = chosen.expect_field
    if digest is not None and entry.get(field) not in (None, digest):
        raise UsageError(f"--digest {digest} differs from the {field} {entry.get(field)} that {lock_from} records; "
                         "valid: one of them")
    return Expected(digest or entry.get(field), (sorted(entry.get("repo_digests") or []) or [None])[0])


def build(name: str, *, engine: str, arch: str | None = None, system: str | None = None, host: str | None = None,
          dry_run: bool = False, log: Log = print) -> Result:
    chosen, target = resolve(name, engine, arch, system, host)
    return chosen.build(target, dry_run=dry_run, log=log)


def pull(name: str, source: str | None, *, engine: str, arch: str | None = None, system: str | None = None,
         host: str | None = None, digest: str | None = None, lock_from: Path | None = None, dry_run: bool = False,
         log: Log = print) -> Result:
    """Pull `source` (default: the registry reference `lock_from` records), insisting on `digest` (default: the
    one `lock_from` records) when one is given."""
    want = expected(name, engine, arch, system, digest, lock_from)
    source = source or want.source
    if source is None:
        raise UsageError("pull needs --from REPO:TAG (or --lock-from LOCK, another site's images.lock that records "
                         f"where image {name} was pushed)")
    chosen, target = resolve(name, engine, arch, system, host, want.digest)
    return chosen.pull(target, source, dry_run=dry_run, log=log)


def push(name: str, destination: str, *, engine: str, arch: str | None = None, system: str | None = None,
         host: str | None = None, dry_run: bool = False) -> Result:
    chosen, target = resolve(name, engine, arch, system, host)
    return chosen.push(target, destination, dry_run=dry_run)


def save(name: str, output: Path | None, *, engine: str, arch: str | None = None, system: str | None = None,
         host: str | None = None, dry_run: bool = False) -> Result:
    """A file another site can load: a Docker archive, the SIF or the squashfs file, per engine."""
    chosen, target = resolve(name, engine, arch, system, host)
    return chosen.save(target, Path(output or chosen.default_output(target)), dry_run=dry_run)


def load(name: str, archive: Path, *, engine: str, arch: str | None = None, system: str | None = None,
         host: str | None = None, digest: str | None = None, lock_from: Path | None = None, dry_run: bool = False,
         log: Log = print) -> Result:
    want = expected(name, engine, arch, system, digest, lock_from)
    chosen, target = resolve(name, engine, arch, system, host, want.digest)
    return chosen.load(target, Path(archive), dry_run=dry_run, log=log)


def verify(name: str, *, engine: str, arch: str | None = None, system: str | None = None, host: str | None = None,
           dry_run: bool = False) -> Result:
    chosen, target = resolve(name, engine, arch, system, host)
    return chosen.verify(target, dry_run=dry_run)


def lock_current(name: str, *, engine: str, arch: str | None = None, system: str | None = None,
                 host: str | None = None, dry_run: bool = False) -> Result:
    """Record the digest of this machine's copy (e.g. built from the committed recipe without dlrun)."""
    chosen, target = resolve(name, engine, arch, system, host)
    return chosen.lock(target, dry_run=dry_run)
