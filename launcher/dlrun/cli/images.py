"""`dlrun images list|show|render|build|pull|push|save|load|verify|lock`: the pinned stacks and their images.

Only typer is imported here at start-up, everything else inside the commands, so `dlrun --help` stays fast.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from dlrun.cli.options import JsonOpt, load_catalog
from dlrun.cli.output import handle_errors, print_json, table
from dlrun.errors import DlrunError
from dlrun.images.engines import DEFAULT_ENGINE

Name = Annotated[str, typer.Argument(help="Image tag (see `dlrun images list`).", show_default=False)]
EngineOpt = Annotated[str, typer.Option("--engine", "-E", help="docker or docker-api (Docker API via docker-py), podman "
                                        "(the same API, Podman's service), singularity, apptainer, charliecloud, "
                                        "debootstrap (charliecloud's root filesystem, bootstrapped: Debian images), "
                                        "or enroot (a squashfs file pyxis runs).")]
ArchOpt = Annotated[Optional[str], typer.Option("--arch", help="x86_64, ppc64le or aarch64 (default: this machine's).")]
SystemOpt = Annotated[Optional[str], typer.Option("--system", "-s", help="Take the architecture from this system.")]
HostOpt = Annotated[Optional[str], typer.Option("--host", help="Docker API endpoint (default: $DOCKER_HOST).")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the exact commands; run nothing.")]
DigestOpt = Annotated[Optional[str], typer.Option("--digest", help="The digest the copy must have (sha256:...): the "
                                                  "image ID (the lock's `digest`; singularity, apptainer, enroot: "
                                                  "the file's sha256); another is refused (exit 1, both digests).")]
LockFromOpt = Annotated[Optional[Path], typer.Option("--lock-from", help="Another site's images.lock: insist on the "
                                                     "digest it records for this image and architecture (and pull "
                                                     "from the registry reference it records, without --from).")]


images_app = typer.Typer(help="Container images: the pinned software stacks.", no_args_is_help=True)


@images_app.command("list")
@handle_errors
def images_list(as_json: JsonOpt = False) -> None:
    """List images."""
    images = load_catalog().images
    if as_json:
        print_json([img.model_dump(mode="json") for img in images.values()])
        return
    table("images", ["name", "kind", "arch", "framework", "description"],
          [[i.name, i.kind, ",".join(i.arch), f"{i.framework} {i.framework_version or ''}", i.description]
           for i in images.values()])


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _report(result, dry_run: bool) -> None:
    if dry_run:
        for step in result.steps:
            print(step.text())
        return
    for message in result.messages:
        print(message)
    if result.entry:
        print(json.dumps(result.entry, indent=2, sort_keys=True))


def _note(value) -> str:
    from dlrun.catalog.stack import NotUsed

    if isinstance(value, NotUsed):
        return f"not used: {value.not_used}"
    return f"stated: {value.stated_in}" if value.stated_in else f"chosen (not stated in the source): {value.chosen}"


def show_rows(spec_file) -> list[list[str]]:
    from dlrun.catalog.stack import NotUsed
    from dlrun.images import lock

    spec = spec_file.spec
    rows = [["name", spec.name], ["description", spec.description], ["spec", spec_file.display_path],
            ["architectures", ", ".join(spec.arch)], ["uri", f"{spec.uri}:<arch>"]]
    for arch in spec.arch:
        base = spec.base_for(arch)
        rows.append([f"base ({arch})", f"{base.reference} — {_note(base)}"])
    rows.append(["os", f"{spec.os.distro} {spec.os.version} — {_note(spec.os)}"])
    rows.append(["python", f"{spec.python_version.version} ({spec.python}) — {_note(spec.python_version)}"])
    for label, value in (("cuda", spec.cuda), ("cudnn", spec.cudnn), ("nccl", spec.nccl)):
        text = "" if isinstance(value, NotUsed) else f"{value.version} ({value.provided_by}) — "
        rows.append([label, text + _note(value)])
    mpi = spec.mpi
    rows.append(["mpi", _note(mpi) if isinstance(mpi, NotUsed) else f"{mpi.describe()} ({mpi.provided_by}) — {_note(mpi)}"])
    install = spec.framework_install
    rows.append(["framework", f"{spec.framework} {spec.framework_version} ({install.method}"
                 + (f": {' '.join(install.packages)}" if install.packages else "") + f") — {_note(install)}"])
    hvd = spec.horovod
    rows.append(["horovod", _note(hvd) if isinstance(hvd, NotUsed) else
                 f"{hvd.version} {' '.join(f'{k}={v}' for k, v in sorted(hvd.build_env.items()))} — {_note(hvd)}"])
    for bench in spec.benchmarks:
        rows.append([f"benchmark {bench.name}", f"{bench.repo} {bench.revision} ({bench.ref}) at {bench.path} — "
                     f"{_note(bench)}"])
    tests = spec.nccl_tests
    rows.append(["nccl-tests", _note(tests) if isinstance(tests, NotUsed) else
                 f"{tests.version} {tests.revision} MPI=1 at {tests.path} — {_note(tests)}"])
    rows.append(["harness", ", ".join(f"{spec.harness_dir}/{f}" for f in spec.harness.files) or "none"])
    for arch in spec.arch:
        entry = lock.entry(spec.name, arch) or {}
        rows.append([f"lock ({arch})", ", ".join(f"{k} {entry[k]}" for k in ("digest", "rootfs", "sif", "squashfs")
                                                 if entry.get(k))
                     or "not built, pulled or loaded here"])
    return rows


@images_app.command("show")
@handle_errors
def show(name: Name, as_json: JsonOpt = False) -> None:
    """Show an image's pinned stack: every version, and whether the source states it or it was chosen (why)."""
    from dlrun.images import lock
    from dlrun.images.spec import get_spec

    spec_file = get_spec(name)
    if as_json:
        data: dict[str, Any] = spec_file.spec.model_dump(mode="json")
        data["spec_path"] = spec_file.display_path
        data["lock"] = {arch: lock.entry(name, arch) for arch in spec_file.spec.arch}
        print(json.dumps(data, indent=2, sort_keys=True))
        return
    table(f"image {name}", ["field", "value"], show_rows(spec_file))

@images_app.command("render")
@handle_errors
def render(names: Annotated[Optional[list[str]], typer.Argument(help="Image tags (default: all).")] = None,
           check: Annotated[bool, typer.Option("--check", help="Change nothing; exit 1 with a diff when a "
                                               "committed recipe differs from its spec.")] = False) -> None:
    """Regenerate the Dockerfiles and Singularity definitions from containers/<tag>/image.yaml."""
    from dlrun.images.recipes import render_all

    written, drifted = render_all(names or None, check=check)
    if check:
        if drifted:
            for drift in drifted:
                sys.stdout.write(drift.diff if drift.diff else f"{drift.path}: missing\n")
            print(f"dlrun: error: {len(drifted)} recipe(s) differ from their specs: "
                  + ", ".join(str(d.path) for d in drifted) + "; run `dlrun images render`", file=sys.stderr)
            raise typer.Exit(1)
        print("all recipes match their specs")
        return
    for path in written:
        print(f"wrote {path}")
    for drift in drifted:
        if drift.path not in written:
            print(f"removed {drift.path}")
    if not drifted:
        print("all recipes were up to date")

@images_app.command("build")
@handle_errors
def build(name: Name, engine: EngineOpt = DEFAULT_ENGINE, arch: ArchOpt = None, system: SystemOpt = None,
          host: HostOpt = None, dry_run: DryRunOpt = False) -> None:
    """Build an image from its generated recipe (Debian specs: --engine debootstrap or charliecloud, no
    registry needed) and record its digest in the site's image lock ($DLRUN_HOME/images.lock)."""
    from dlrun.images import ops

    _report(ops.build(name, engine=engine, arch=arch, system=system, host=host, dry_run=dry_run, log=_log),
            dry_run)

@images_app.command("pull")
@handle_errors
def pull(name: Name, source: Annotated[Optional[str], typer.Option("--from", help="Where to pull from: REPO:TAG, "
                                                                   "REPO@sha256:... or docker://REPO:TAG (every "
                                                                   "engine, each written as its tool takes it; a tag "
                                                                   "of an OCI image index gives this architecture's "
                                                                   "image); oras://, library://, shub://, https:// "
                                                                   "(singularity, apptainer); dockerd://, podman:// "
                                                                   "(enroot).")] = None,
         engine: EngineOpt = DEFAULT_ENGINE, arch: ArchOpt = None, system: SystemOpt = None, host: HostOpt = None,
         digest: DigestOpt = None, lock_from: LockFromOpt = None, dry_run: DryRunOpt = False) -> None:
    """Pull a shared copy of an image; refuse it if its digest is not the one asked for (--digest, --lock-from)
    or differs from the site's image lock."""
    from dlrun.images import ops

    _report(ops.pull(name, source, engine=engine, arch=arch, system=system, host=host, digest=digest,
                     lock_from=lock_from, dry_run=dry_run), dry_run)

@images_app.command("push")
@handle_errors
def push(name: Name, destination: Annotated[str, typer.Option("--to", help="Registry reference to push to "
                                                              "(singularity, apptainer: oras:// or library://).")],
         engine: EngineOpt = DEFAULT_ENGINE, arch: ArchOpt = None, system: SystemOpt = None, host: HostOpt = None,
         dry_run: DryRunOpt = False) -> None:
    """Push an image (after verifying it) to REPO:TAG-<arch>, add it to the OCI image index at REPO:TAG (one tag
    for every architecture pushed there), and record both digests."""
    from dlrun.images import ops

    _report(ops.push(name, destination, engine=engine, arch=arch, system=system, host=host, dry_run=dry_run),
            dry_run)

@images_app.command("save")
@handle_errors
def save(name: Name, output: Annotated[Optional[Path], typer.Option("--output", "-o", help="File to write "
                                                                    "(default: <tag>_<arch>.tar, .sif or .sqsh).")] = None,
         engine: EngineOpt = DEFAULT_ENGINE, arch: ArchOpt = None, system: SystemOpt = None, host: HostOpt = None,
         dry_run: DryRunOpt = False) -> None:
    """Write an image to a file for another site: a Docker archive, the SIF or the squashfs (verified first)."""
    from dlrun.images import ops

    _report(ops.save(name, output, engine=engine, arch=arch, system=system, host=host, dry_run=dry_run), dry_run)

@images_app.command("load")
@handle_errors
def load(file: Annotated[Path, typer.Argument(help="Docker archive (.tar), SIF file (singularity, apptainer) "
                                               "or squashfs file (enroot).")],
         name: Annotated[Optional[str], typer.Argument(help="Image tag (default: from the archive's labels).")] = None,
         engine: EngineOpt = DEFAULT_ENGINE, arch: ArchOpt = None, system: SystemOpt = None, host: HostOpt = None,
         digest: DigestOpt = None, lock_from: LockFromOpt = None, dry_run: DryRunOpt = False) -> None:
    """Load an image file; refuse it if its digest is not the one asked for (--digest, --lock-from) or differs
    from the site's image lock."""
    from dlrun.images import ops

    if not dry_run and not file.exists():
        raise DlrunError(f"{file} does not exist", exit_code=2)
    if name is None:
        name, label_arch = _labels_of(file)
        arch = arch or label_arch
    _report(ops.load(name, file, engine=engine, arch=arch, system=system, host=host, digest=digest,
                     lock_from=lock_from, dry_run=dry_run, log=_log), dry_run)

@images_app.command("verify")
@handle_errors
def verify(name: Name, engine: EngineOpt = DEFAULT_ENGINE, arch: ArchOpt = None, system: SystemOpt = None,
           host: HostOpt = None, dry_run: DryRunOpt = False) -> None:
    """Compare this machine's copy of an image with the site's image lock; exit 1 (both digests) if it differs."""
    from dlrun.images import ops

    _report(ops.verify(name, engine=engine, arch=arch, system=system, host=host, dry_run=dry_run), dry_run)

@images_app.command("lock")
@handle_errors
def lock_cmd(name: Name, engine: EngineOpt = DEFAULT_ENGINE, arch: ArchOpt = None, system: SystemOpt = None,
             host: HostOpt = None, dry_run: DryRunOpt = False) -> None:
    """Record the digest of this machine's copy (e.g. built from the committed recipe without dlrun)."""
    from dlrun.images import ops

    _report(ops.lock_current(name, engine=engine, arch=arch, system=system, host=host, dry_run=dry_run), dry_run)



def _labels_of(file: Path) -> tuple[str, str | None]:
    from dlrun.images.archive import read_docker_archive

    try:
        labels = (read_docker_archive(file).config.get("config") or {}).get("Labels") or {}
    except DlrunError:
        raise DlrunError(f"{file} is not a Docker archive, so its image is unknown; name it: "
                         f"dlrun images load {file} <image>", exit_code=2) from None
    if "dlrun.image" not in labels:
        raise DlrunError(f"{file} has no dlrun.image label; name the image: dlrun images load {file} <image>",
                         exit_code=2)
    return labels["dlrun.image"], labels.get("dlrun.arch")
