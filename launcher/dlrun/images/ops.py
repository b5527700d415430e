"""`dlrun images build|pull|push|save|load|verify|lock`, per engine.

Engines: `docker` (the Docker API through docker-py), `podman` (the same API, Podman's service socket),
`singularity` / `apptainer` (their CLIs; SIF files), `charliecloud` (a root filesystem directory: built
with debootstrap for Debian specs, else with ch-image; loaded by unpacking a Docker archive);
`debootstrap` is `charliecloud` for Debian specs, named for what it does.
Each operation first describes itself as steps (`--dry-run` prints them), then runs exactly them.
After build/pull/load the digest goes to images.lock; pull/load/save/verify refuse a digest that differs
from the lock (exit 1, both digests shown).
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlrun.paths import builtin_root

REPO_ROOT = builtin_root()  # the build context and the lock's old place; see dlrun.paths
from dlrun.errors import DlrunError, UsageError, unknown_name
from dlrun.images import lock
from dlrun.images.spec import (SpecFile, archive_path, artifact_dir, choose_arch, get_spec, host_arch, rootfs_path,
                               sif_path)
from dlrun.images.steps import ApiCall, Command, Note, require_tool, run_command

ENGINES = ("docker", "podman", "singularity", "apptainer", "charliecloud", "debootstrap")
API_ENGINES = ("docker", "podman")
SIF_ENGINES = ("singularity", "apptainer")
Log = Callable[[str], None]


@dataclass
class Result:
    steps: list[Any]                     # Command | ApiCall, in order
    entry: dict[str, Any] | None = None  # the lock entry after the operation
    messages: list[str] = field(default_factory=list)


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise unknown_name("engine", engine, ENGINES)
    return engine


class DigestMismatch(DlrunError):
    exit_code = 1


def mismatch(name: str, arch: str, what: str, expected: str, actual: str, where: str) -> DigestMismatch:
    return DigestMismatch(
        f"digest mismatch for image {name} ({arch}), {what}: images.lock records {expected}, but {where} has {actual}; "
        f"refusing it. Rebuild or re-pull the image, or record the new digest on purpose: "
        f"dlrun images lock {name} --engine ...")


def _recipe(spec_file: SpecFile, arch: str, fmt: str) -> str:
    from dlrun.images.recipes import recipe_name

    path = spec_file.folder / recipe_name(arch, fmt)
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _ensure_native(spec_file: SpecFile, arch: str, engine: str) -> None:
    if arch != host_arch():
        raise UsageError(f"{engine} builds for this machine's architecture ({host_arch()}); image "
                         f"{spec_file.spec.name!r} {arch} must be built on a {arch} node")


def _context(name: str, arch: str | None, system: str | None, engine: str) -> tuple[SpecFile, str, str]:
    """(spec file, architecture, engine), with `debootstrap` read as `charliecloud` (the same root filesystem)."""
    check_engine(engine)
    spec_file = get_spec(name)
    if engine == "debootstrap" and spec_file.spec.debootstrap is None:
        raise UsageError(f"image {name!r} has no `debootstrap:` section; only Debian images build with debootstrap. "
                         "valid: --engine docker|podman|singularity|apptainer|charliecloud")
    engine = "charliecloud" if engine == "debootstrap" else engine
    return spec_file, choose_arch(spec_file.spec, arch, system), engine


# ----------------------------------------------------------------------------------------------- build
def build(name: str, *, engine: str, arch: str | None = None, system: str | None = None, host: str | None = None,
          dry_run: bool = False, log: Log = print) -> Result:
    spec_file, arch, engine = _context(name, arch, system, engine)
    spec = spec_file.spec
    ref = spec.reference(arch)
    if engine in API_ENGINES:
        from dlrun.images import docker_api

        url = docker_api.endpoint(engine, host)
        steps = [ApiCall([engine, "build", "-f", _recipe(spec_file, arch, "docker"), "-t", ref, "--platform",
                          docker_api.PLATFORM[arch], str(REPO_ROOT)], url)]
        if dry_run:
            return Result(steps)
        api = docker_api.client(engine, host)
        docker_api.build(api, context=REPO_ROOT, dockerfile=_recipe(spec_file, arch, "docker"), tag=ref, arch=arch,
                         log=log)
        fields = docker_api.inspect(api, ref)
        entry = lock.record(spec.name, arch, replace=True, spec_sha256=spec_file.sha256,
                            recorded_by=f"build ({engine})", **fields)
        return Result(steps, entry)
    if engine in SIF_ENGINES:
        sif = sif_path(spec.name, arch)
        argv = [engine, "build"] + ([] if os.geteuid() == 0 else ["--fakeroot"]) + [str(sif),
                                                                                     _recipe(spec_file, arch, "singularity")]
        steps = [Command(["mkdir", "-p", str(sif.parent)]), Command(argv, cwd=str(REPO_ROOT))]
        if dry_run:
            return Result(steps)
        _ensure_native(spec_file, arch, engine)
        require_tool(engine)
        sif.parent.mkdir(parents=True, exist_ok=True)
        run_command(steps[1])
        from dlrun.images.digest import file_sha256

        entry = lock.record(spec.name, arch, replace=True, sif=file_sha256(sif), spec_sha256=spec_file.sha256,
                            size_bytes=sif.stat().st_size, recorded_by=f"build ({engine})")
        return Result(steps, entry)
    # charliecloud
    if spec.debootstrap is not None:
        from dlrun.images import debootstrap

        steps = debootstrap.planned_commands(spec_file, arch)
        if dry_run:
            return Result(steps)
        fields = debootstrap.build(spec_file, arch, log)
        entry = lock.record(spec.name, arch, replace=True, **fields)
        return Result(steps, entry)
    tag = f"dlrun/{spec.name}:{arch}"
    rootfs = rootfs_path(spec.name, arch)
    steps = [Command(["ch-image", "build", "-t", tag, "-f", _recipe(spec_file, arch, "docker"), "."], cwd=str(REPO_ROOT)),
             Command(["ch-convert", "-i", "ch-image", "-o", "dir", tag, str(rootfs)])]
    if dry_run:
        return Result(steps)
    _ensure_native(spec_file, arch, "ch-image")
    if rootfs.exists():
        shutil.rmtree(rootfs)
    rootfs.parent.mkdir(parents=True, exist_ok=True)
    for step in steps:
        run_command(step)
    from dlrun.images.digest import tree_digest

    entry = lock.record(spec.name, arch, replace=True, rootfs=tree_digest(rootfs), spec_sha256=spec_file.sha256,
                        recorded_by="build (charliecloud)")
    return Result(steps, entry)


# ----------------------------------------------------------------------------------------------- digests
def current_digest(name: str, arch: str, engine: str, *, host: str | None = None, api=None) -> tuple[str, str, str]:
    """(lock field, digest of what this machine has, where it is) for the engine's form of the image."""
    from dlrun.images.digest import file_sha256, tree_digest

    spec_file = get_spec(name)
    if engine in API_ENGINES:
        from dlrun.images import docker_api

        api = api or docker_api.client(engine, host)
        ref = spec_file.spec.reference(arch)
        found = docker_api.image_id(api, ref)
        if found is None:
            raise DlrunError(f"image {ref} is not in the engine at {docker_api.endpoint(engine, host)}; "
                             f"build, pull or load it first (dlrun images load ... --engine {engine})")
        return "digest", found, f"{ref} at {docker_api.endpoint(engine, host)}"
    if engine in SIF_ENGINES:
        sif = sif_path(name, arch)
        if not sif.exists():
            raise DlrunError(f"{sif} does not exist; build, pull or load the SIF first")
        return "sif", file_sha256(sif), str(sif)
    rootfs = rootfs_path(name, arch)
    if not rootfs.is_dir():
        raise DlrunError(f"{rootfs} does not exist; build it (dlrun images build {name} --engine charliecloud) "
                         "or load an archive (dlrun images load FILE --engine charliecloud)")
    return "rootfs", tree_digest(rootfs), str(rootfs)


def verify(name: str, *, engine: str, arch: str | None = None, system: str | None = None, host: str | None = None,
           dry_run: bool = False) -> Result:
    spec_file, arch, engine = _context(name, arch, system, engine)
    what = {"docker": "image ID", "podman": "image ID", "charliecloud": "root filesystem"}.get(engine, "SIF file")
    steps = [Note(f"compare the {what} of {name} ({arch}) with images.lock")]
    if dry_run:
        return Result(steps)
    recorded = lock.entry(name, arch) or {}
    field_name, actual, where = current_digest(name, arch, engine, host=host)
    expected = recorded.get(field_name)
    if not expected:
        raise DlrunError(f"images.lock ({lock.lock_path()}) has no {field_name} digest for {name} ({arch}); "
                         f"build, pull or load it, or record what is here: dlrun images lock {name} --engine {engine}")
    if expected != actual:
        raise mismatch(name, arch, what, expected, actual, where)
    return Result(steps, recorded, [f"{name} ({arch}) {what} {actual}: matches images.lock"])


def lock_current(name: str, *, engine: str, arch: str | None = None, system: str | None = None,
                 host: str | None = None, dry_run: bool = False) -> Result:
    """Record the digest of what this machine has (e.g. built from the committed recipe without dlrun)."""
    spec_file, arch, engine = _context(name, arch, system, engine)
    steps = [Note(f"record the {engine} digest of {name} ({arch}) in {lock.lock_path()}")]
    if dry_run:
        return Result(steps)
    field_name, actual, _ = current_digest(name, arch, engine, host=host)
    extra: dict[str, Any] = {}
    if engine in API_ENGINES:
        from dlrun.images import docker_api

        extra = docker_api.inspect(docker_api.client(engine, host), spec_file.spec.reference(arch))
    elif engine == "charliecloud" and archive_path(name, arch).exists():
        from dlrun.images.archive import read_docker_archive

        extra = {"digest": read_docker_archive(archive_path(name, arch)).image_id}
    extra[field_name] = actual
    entry = lock.record(name, arch, spec_sha256=spec_file.sha256, recorded_by=f"lock ({engine})", **extra)
    return Result(steps, entry, [f"recorded {field_name} {actual} for {name} ({arch})"])


def _check_against_lock(name: str, arch: str, field_name: str, actual: str, what: str, where: str) -> bool:
    """True when the lock already has this digest; raise when it has another; False when it has none."""
    expected = (lock.entry(name, arch) or {}).get(field_name)
    if expected and expected != actual:
        raise mismatch(name, arch, what, expected, actual, where)
    return bool(expected)


# ----------------------------------------------------------------------------------------------- pull / push
def _sif_source(source: str) -> str:
    return source if "://" in source else f"docker://{source}"


def pull(name: str, source: str, *, engine: str, arch: str | None = None, system: str | None = None,
         host: str | None = None, dry_run: bool = False) -> Result:
    spec_file, arch, engine = _context(name, arch, system, engine)
    ref = spec_file.spec.reference(arch)
    if engine in API_ENGINES:
        from dlrun.images import docker_api

        url = docker_api.endpoint(engine, host)
        steps = [ApiCall([engine, "pull", "--platform", docker_api.PLATFORM[arch], source], url),
                 ApiCall([engine, "tag", source, ref], url)]
        if dry_run:
            return Result(steps)
        api = docker_api.client(engine, host)
        found = docker_api.pull(api, source, arch=arch, tag=ref)
        _check_against_lock(name, arch, "digest", found, "image ID", f"{source} (pulled)")
        entry = lock.record(name, arch, recorded_by=f"pull ({engine}) {source}", spec_sha256=spec_file.sha256,
                            **docker_api.inspect(api, ref))
        return Result(steps, entry)
    if engine in SIF_ENGINES:
        sif = sif_path(name, arch)
        steps = [Command(["mkdir", "-p", str(sif.parent)]),
                 Command([engine, "pull", "--force", str(sif), _sif_source(source)])]
        if dry_run:
            return Result(steps)
        require_tool(engine)
        sif.parent.mkdir(parents=True, exist_ok=True)
        run_command(steps[1])
        from dlrun.images.digest import file_sha256

        digest = file_sha256(sif)
        _check_against_lock(name, arch, "sif", digest, "SIF file", f"{sif} (pulled from {source})")
        entry = lock.record(name, arch, sif=digest, recorded_by=f"pull ({engine}) {source}")
        return Result(steps, entry)
    rootfs = rootfs_path(name, arch)
    tag = f"dlrun/{name}:{arch}"
    steps = [Command(["ch-image", "pull", f"--arch={arch}", source, tag]),
             Command(["ch-convert", "-i", "ch-image", "-o", "dir", tag, str(rootfs)])]
    if dry_run:
        return Result(steps)
    if rootfs.exists():
        shutil.rmtree(rootfs)
    for step in steps:
        run_command(step)
    from dlrun.images.digest import tree_digest

    digest = tree_digest(rootfs)
    _check_against_lock(name, arch, "rootfs", digest, "root filesystem", f"{rootfs} (pulled from {source})")
    entry = lock.record(name, arch, rootfs=digest, recorded_by=f"pull (charliecloud) {source}")
    return Result(steps, entry)


def push(name: str, destination: str, *, engine: str, arch: str | None = None, system: str | None = None,
         host: str | None = None, dry_run: bool = False) -> Result:
    spec_file, arch, engine = _context(name, arch, system, engine)
    ref = spec_file.spec.reference(arch)
    if engine in API_ENGINES:
        from dlrun.images import docker_api

        url = docker_api.endpoint(engine, host)
        steps = [ApiCall([engine, "tag", ref, destination], url), ApiCall([engine, "push", destination], url)]
        if dry_run:
            return Result(steps)
        verify(name, engine=engine, arch=arch, host=host)  # never share an image that is not the locked one
        repo_digest = docker_api.push(docker_api.client(engine, host), ref, destination)
        known = (lock.entry(name, arch) or {}).get("repo_digests") or []
        entry = lock.record(name, arch, repo_digests=sorted(set(known) | ({repo_digest} if repo_digest else set())))
        return Result(steps, entry, [f"pushed {destination}" + (f" ({repo_digest})" if repo_digest else "")])
    if engine in SIF_ENGINES:
        steps = [Command([engine, "push", str(sif_path(name, arch)), destination])]
        if dry_run:
            return Result(steps)
        require_tool(engine)
        verify(name, engine=engine, arch=arch)
        run_command(steps[0])
        return Result(steps, lock.entry(name, arch), [f"pushed {destination}"])
    steps = [Command(["ch-image", "push", f"dlrun/{name}:{arch}", destination])]
    if dry_run:
        return Result(steps)
    verify(name, engine=engine, arch=arch)
    run_command(steps[0])
    return Result(steps, lock.entry(name, arch), [f"pushed {destination}"])


# ----------------------------------------------------------------------------------------------- save / load
def default_save_path(name: str, arch: str, engine: str) -> Path:
    return Path(f"{name}_{arch}.sif" if engine in SIF_ENGINES else f"{name}_{arch}.tar")


def save(name: str, output: Path | None, *, engine: str, arch: str | None = None, system: str | None = None,
         host: str | None = None, dry_run: bool = False) -> Result:
    """A file another site can load: a Docker archive (docker, podman, charliecloud) or the SIF."""
    spec_file, arch, engine = _context(name, arch, system, engine)
    output = Path(output or default_save_path(name, arch, engine))
    ref = spec_file.spec.reference(arch)
    if engine in API_ENGINES:
        from dlrun.images import docker_api

        steps = [ApiCall([engine, "save", "-o", str(output), ref], docker_api.endpoint(engine, host))]
        if dry_run:
            return Result(steps)
        verify(name, engine=engine, arch=arch, host=host)
        docker_api.save(docker_api.client(engine, host), ref, output)
    else:
        source = sif_path(name, arch) if engine in SIF_ENGINES else archive_path(name, arch)
        steps = [Command(["cp", str(source), str(output)])]
        if dry_run:
            return Result(steps)
        if engine in SIF_ENGINES:
            verify(name, engine=engine, arch=arch)
        else:
            if not source.exists():
                raise DlrunError(f"{source} does not exist: only images built by dlrun (debootstrap) or loaded from "
                                 "an archive have one; save from docker/podman instead")
            from dlrun.images.archive import read_docker_archive

            recorded = (lock.entry(name, arch) or {}).get("digest")
            actual = read_docker_archive(source).image_id
            if recorded != actual:
                raise mismatch(name, arch, "image ID", str(recorded), actual, str(source))
        shutil.copyfile(source, output)
    return Result(steps, lock.entry(name, arch), [f"saved {output}"])


def load(name: str, archive: Path, *, engine: str, arch: str | None = None, system: str | None = None,
         host: str | None = None, dry_run: bool = False, log: Log = print) -> Result:
    """Load a Docker archive (docker, podman, charliecloud) or a SIF; refuse one whose digest differs from the lock."""
    spec_file, arch, engine = _context(name, arch, system, engine)
    archive = Path(archive)
    ref = spec_file.spec.reference(arch)
    if engine in SIF_ENGINES:
        sif = sif_path(name, arch)
        steps = [Command(["mkdir", "-p", str(sif.parent)]), Command(["cp", str(archive), str(sif)])]
        if dry_run:
            return Result(steps)
        from dlrun.images.digest import file_sha256

        digest = file_sha256(archive)
        _check_against_lock(name, arch, "sif", digest, "SIF file", str(archive))
        sif.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(archive, sif)
        return Result(steps, lock.record(name, arch, sif=digest, recorded_by=f"load ({engine}) {archive.name}"))

    from dlrun.images.archive import read_docker_archive

    if engine in API_ENGINES:
        from dlrun.images import docker_api

        url = docker_api.endpoint(engine, host)
        steps = [ApiCall([engine, "load", "-i", str(archive)], url), ApiCall([engine, "tag", "<loaded image>", ref], url)]
        if dry_run:
            return Result(steps)
        info = read_docker_archive(archive)
        known = _check_against_lock(name, arch, "digest", info.image_id, "image ID", str(archive))
        api = docker_api.client(engine, host)
        if docker_api.image_id(api, info.image_id) == info.image_id:
            log(f"{info.image_id[:19]}… is already in the engine; tagging it {ref}")
            api.images.get(info.image_id).tag(*docker_api.split_tag(ref))
        else:
            loaded = docker_api.load(api, archive, ref)
            if loaded != info.image_id:
                raise mismatch(name, arch, "image ID", info.image_id, loaded, f"the engine at {url} after loading")
        if known:  # the lock already describes this image; the engine's view adds nothing to it
            return Result(steps, lock.entry(name, arch), [f"loaded {ref} ({info.image_id}), as images.lock records"])
        fields = {k: v for k, v in docker_api.inspect(api, ref).items() if k != "repo_digests"}
        entry = lock.record(name, arch, recorded_by=f"load ({engine}) {archive.name}", spec_sha256=spec_file.sha256,
                            **fields)
        return Result(steps, entry)

    # charliecloud: unpack the archive's layers into the image store
    rootfs = rootfs_path(name, arch)
    steps = [Note(f"unpack {archive} layer by layer (digests checked first) into {rootfs}"),
             Command(["cp", str(archive), str(archive_path(name, arch))])]
    if dry_run:
        return Result(steps)
    from dlrun.images.archive import unpack_docker_archive
    from dlrun.images.digest import tree_digest

    info = read_docker_archive(archive)
    _check_against_lock(name, arch, "digest", info.image_id, "image ID", str(archive))
    store = artifact_dir(name, arch)
    store.mkdir(parents=True, exist_ok=True)
    tmp = store / "rootfs.load"
    if tmp.exists():
        shutil.rmtree(tmp)
    unpack_docker_archive(archive, tmp)
    digest = tree_digest(tmp)
    try:
        _check_against_lock(name, arch, "rootfs", digest, "root filesystem", f"{tmp} (unpacked from {archive})")
    except DigestMismatch:
        shutil.rmtree(tmp)
        raise
    if rootfs.exists():
        shutil.rmtree(rootfs)
    tmp.rename(rootfs)
    if archive.resolve() != archive_path(name, arch).resolve():
        shutil.copyfile(archive, archive_path(name, arch))
    entry = lock.record(name, arch, digest=info.image_id, rootfs=digest, layers=info.diff_ids,
                        recorded_by=(lock.entry(name, arch) or {}).get("recorded_by") or f"load (charliecloud) {archive.name}")
    return Result(steps, entry)
