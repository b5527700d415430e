"""`dlrun images build|pull|push|save|load|verify|lock`: find the image spec, the architecture and the
engine (`dlrun.registry.ENGINES`), and hand the operation to the engine (dlrun.images.engines)."""
from __future__ import annotations

from pathlib import Path

from dlrun.images.engines.base import Engine, Log, Result, Target
from dlrun.images.spec import choose_arch, get_spec
from dlrun.registry import ENGINES


def resolve(name: str, engine: str, arch: str | None = None, system: str | None = None,
            host: str | None = None) -> tuple[Engine, Target]:
    """The engine and the image it works on; unknown names and unsupported architectures are usage errors."""
    ENGINES.check(engine)
    spec_file = get_spec(name)
    chosen = ENGINES.get(engine)
    return chosen, chosen.target(spec_file, choose_arch(spec_file.spec, arch, system), host)


def build(name: str, *, engine: str, arch: str | None = None, system: str | None = None, host: str | None = None,
          dry_run: bool = False, log: Log = print) -> Result:
    chosen, target = resolve(name, engine, arch, system, host)
    return chosen.build(target, dry_run=dry_run, log=log)


def pull(name: str, source: str, *, engine: str, arch: str | None = None, system: str | None = None,
         host: str | None = None, dry_run: bool = False, log: Log = print) -> Result:
    chosen, target = resolve(name, engine, arch, system, host)
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
         host: str | None = None, dry_run: bool = False, log: Log = print) -> Result:
    chosen, target = resolve(name, engine, arch, system, host)
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
