"""Build a Debian image with no registry: debootstrap the pinned packages, add dlrun's layer.

Two layers, like a Docker build: the bootstrapped Debian tree (cached per package set, so a second
build only redoes dlrun's small layer) and dlrun's own files (harness, image metadata, mount points).
Results, in the image store:
  rootfs/    the unpacked tree Charliecloud runs (the base hard-linked from the cache, plus dlrun's layer)
  image.tar  a Docker archive of the same two layers, for `docker load`/`podman load` or another site
The image ID (sha256 of the config) covers both layers; the config's `created` time is the base's, so
rebuilding from the same cache gives the same ID.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dlrun import paths
from dlrun.catalog.stack import PinnedImageSpec
from dlrun.errors import DlrunError
from dlrun.images.archive import Layer, canonical_json, read_docker_archive, write_docker_archive
from dlrun.images.digest import bytes_sha256, file_sha256, tree_digest
from dlrun.images.spec import SpecFile, archive_path, artifact_dir, host_arch, rootfs_path
from dlrun.images.steps import Command, Note, require_tool, run_command

DEB_ARCH = {"x86_64": "amd64", "ppc64le": "ppc64el", "aarch64": "arm64"}
OCI_ARCH = {"x86_64": "amd64", "ppc64le": "ppc64le", "aarch64": "arm64"}
BASE_FORMAT = 1  # bump when the cleanup below changes, so cached bases are rebuilt
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
Log = Callable[[str], None]


def _require_debootstrap(spec: PinnedImageSpec):
    if spec.debootstrap is None:
        raise DlrunError(f"image {spec.name!r} has no `debootstrap:` section; only Debian images build without a "
                         "registry. Build it with --engine docker|podman|singularity|apptainer|charliecloud")
    return spec.debootstrap


def base_key(spec: PinnedImageSpec, arch: str) -> str:
    boot = _require_debootstrap(spec)
    data = {"format": BASE_FORMAT, "arch": arch, "suite": boot.suite, "variant": boot.variant, "mirror": boot.mirror,
            "packages": sorted(f"{p.name}={p.version}" for p in boot.packages)}
    return hashlib.sha256(canonical_json(data)).hexdigest()[:16]


def base_dir(spec: PinnedImageSpec, arch: str) -> Path:
    boot = _require_debootstrap(spec)
    return paths.cache_home() / "debootstrap" / f"{boot.suite}-{arch}-{base_key(spec, arch)}"


def debootstrap_command(spec: PinnedImageSpec, arch: str, target: Path) -> Command:
    boot = _require_debootstrap(spec)
    include = ",".join(sorted(p.name for p in boot.packages))
    return Command(["debootstrap", f"--variant={boot.variant}", f"--arch={DEB_ARCH[arch]}", f"--include={include}",
                    boot.suite, str(target), boot.mirror])


def layer_tar_command(rootfs: Path, target: Path, epoch: int | str) -> Command:
    # Owners are flattened to root, as Charliecloud does: an unprivileged unpack could not keep them anyway.
    return Command(["tar", "--sort=name", "--format=posix", "--numeric-owner", "--owner=0", "--group=0",
                    f"--mtime=@{epoch}", "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
                    "-C", str(rootfs), "-cf", str(target), "."])


def planned_commands(spec_file: SpecFile, arch: str) -> list[Command]:
    """What `build --engine charliecloud` runs for a Debian spec (for --dry-run)."""
    spec = spec_file.spec
    base = base_dir(spec, arch)
    image = artifact_dir(spec.name, arch)
    cached = (base / "base.json").exists()
    return [
        Command(debootstrap_command(spec, arch, base / "rootfs.tmp").argv,
                note="cached, skipped" if cached else "then: versions checked, /dev emptied, logs and apt lists removed"),
        Command(layer_tar_command(base / "rootfs", base / "layer.tar", "<bootstrap time>").argv,
                note="cached, skipped" if cached else "the base layer"),
        Command(["cp", "-al", str(base / "rootfs"), str(image / "rootfs.tmp")]),
        Note(f"dlrun's layer into rootfs.tmp: {spec.harness_dir}, /etc/dlrun/image.json, /ch/environment, /data"),
        Note(f"write {image / 'image.tar'} (Docker archive of both layers); rootfs.tmp -> {image / 'rootfs'}; "
             "record the digests in images.lock"),
    ]


def _umount_proc(root: Path) -> None:
    for sub in ("proc", "sys"):
        point = root / sub
        if os.path.ismount(point):
            subprocess.run(["umount", "-l", str(point)], check=False)


def _installed_versions(root: Path) -> dict[str, str]:
    out = subprocess.run(["dpkg-query", f"--admindir={root}/var/lib/dpkg", "-W", "-f", "${Package}\t${Version}\n"],
                         capture_output=True, text=True, check=True).stdout
    return dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)


def check_versions(spec: PinnedImageSpec, installed: dict[str, str]) -> dict[str, str]:
    boot = _require_debootstrap(spec)
    problems = []
    for package in boot.packages:
        have = installed.get(package.name)
        if have is None:
            problems.append(f"{package.name} is not installed")
        elif not package.matches(have):
            problems.append(f"{package.name} {have} (the spec pins {package.version})")
    if problems:
        raise DlrunError(f"the Debian mirror does not give what containers/{spec.name}/image.yaml pins: "
                         + "; ".join(problems) + ". Update the pins in the spec (and re-render), or point "
                         "`debootstrap.mirror` at a snapshot that has them")
    return {p.name: installed[p.name] for p in boot.packages}


def _clean_base(root: Path) -> None:
    """Remove what belongs to the build host or the build time, not to the image."""
    _umount_proc(root)
    for child in (root / "dev").iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    for pattern in ("var/cache/apt/*.bin", "var/cache/apt/archives/*.deb", "var/lib/apt/lists/*",
                    "var/cache/ldconfig/aux-cache", "var/log/**/*", "etc/hostname"):
        for path in sorted(root.glob(pattern), reverse=True):
            if path.is_file() or path.is_symlink():
                path.unlink()
    # Runtimes bind the host's copies over these; Charliecloud needs the files to exist.
    for name in ("etc/resolv.conf", "etc/hosts"):
        path = root / name
        if path.is_symlink():
            path.unlink()
        path.write_text("")
        path.chmod(0o644)


def build_base(spec: PinnedImageSpec, arch: str, log: Log) -> dict:
    base = base_dir(spec, arch)
    meta = base / "base.json"
    if meta.exists():
        data = json.loads(meta.read_text())
        log(f"base: cached {base} (bootstrapped {time.strftime('%Y-%m-%d %H:%M', time.gmtime(data['created']))})")
        return data
    if os.geteuid() != 0:
        raise DlrunError("debootstrap needs root (it runs dpkg in a chroot); run the build as root, or build with "
                         "--engine docker|podman|singularity from the generated recipes")
    from dlrun.images import emulation

    emulated = emulation.ensure(arch, log)  # another architecture: its packages' scripts run under qemu
    require_tool("debootstrap")
    require_tool("tar")
    base.mkdir(parents=True, exist_ok=True)
    tmp = base / "rootfs.tmp"
    if tmp.exists():
        _umount_proc(tmp)
        shutil.rmtree(tmp)
    started = time.time()
    command = debootstrap_command(spec, arch, tmp)
    log(f"base: {command.text()}" + (f"    # emulated: {arch} on this {host_arch()} machine, many times slower"
                                      if emulated else ""))
    with open(base / "debootstrap.log", "w") as out:
        proc = subprocess.run(command.argv, stdout=out, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        _umount_proc(tmp)
        tail = (base / "debootstrap.log").read_text().splitlines()[-3:]
        raise DlrunError(f"debootstrap failed (exit {proc.returncode}): {' | '.join(tail)} "
                         f"(full log: {base / 'debootstrap.log'})")
    _clean_base(tmp)
    versions = check_versions(spec, _installed_versions(tmp))
    built_as = emulation.rootfs_arch(tmp)
    if built_as != arch:
        raise DlrunError(f"debootstrap --arch={DEB_ARCH[arch]} made a tree whose interpreter is built for "
                         f"{built_as or 'no known architecture'}, not {arch}; see {base / 'debootstrap.log'}")
    created = int(time.time())
    layer_tmp = base / "layer.tar.tmp"
    run_command(layer_tar_command(tmp, layer_tmp, created), quiet=True)
    diff_id = file_sha256(layer_tmp)
    if (base / "rootfs").exists():
        shutil.rmtree(base / "rootfs")
    tmp.rename(base / "rootfs")
    layer_tmp.rename(base / "layer.tar")
    data = {"created": created, "diff_id": diff_id, "packages": versions, "command": command.argv,
            "seconds": round(time.time() - started, 1), "layer_bytes": (base / "layer.tar").stat().st_size,
            "built_on": host_arch(), "emulated": emulated}
    meta.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    log(f"base: bootstrapped in {data['seconds']} s, layer {diff_id[:19]}…")
    return data


@dataclass(frozen=True)
class TopFile:
    path: str   # inside the image, no leading slash
    data: bytes | None  # None: a directory
    mode: int


def top_layer_files(spec_file: SpecFile, arch: str, base: dict) -> list[TopFile]:
    from dlrun.images.recipes import labels

    spec = spec_file.spec
    harness_dir = spec.harness_dir.strip("/")
    files = [TopFile("ch", None, 0o755), TopFile("data", None, 0o755), TopFile("etc/dlrun", None, 0o755)]
    parts = Path(harness_dir).parts
    for depth in range(1, len(parts) + 1):
        files.append(TopFile("/".join(parts[:depth]), None, 0o755))
    harness = {}
    for name in spec.harness.files:
        data = (paths.HARNESS_DIR / name).read_bytes()
        harness[name] = bytes_sha256(data)
        files.append(TopFile(f"{harness_dir}/{name}", data, 0o644))
    env = {"PATH": DEFAULT_PATH, **spec.env}
    files.append(TopFile("ch/environment", "".join(f"{k}={v}\n" for k, v in sorted(env.items())).encode(), 0o644))
    meta = {"image": spec.name, "arch": arch, "spec": spec_file.display_path, "spec_sha256": spec_file.sha256,
            "labels": labels(spec_file, arch), "packages": base["packages"], "harness": harness,
            "base_layer": base["diff_id"]}
    files.append(TopFile("etc/dlrun/image.json", (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode(), 0o644))
    # /opt exists in Debian's tree: only directories dlrun creates belong to its layer.
    return sorted((f for f in files if f.path != "opt"), key=lambda f: f.path)


def top_layer_tar(files: list[TopFile], mtime: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for item in files:
            info = tarfile.TarInfo(item.path)
            info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = mtime, item.mode, 0, 0, "root", "root"
            if item.data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(item.data)
                tar.addfile(info, io.BytesIO(item.data))
    return out.getvalue()


def _write_top(root: Path, files: list[TopFile]) -> None:
    for item in files:
        path = root / item.path
        if item.data is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            tmp = path.with_name(f".{path.name}.tmp")  # a new inode: never write into a hard-linked base file
            tmp.write_bytes(item.data)
            os.replace(tmp, path)
        path.chmod(item.mode)


def image_config(spec_file: SpecFile, arch: str, base: dict, top_diff: str, boot_argv: list[str]) -> dict:
    from dlrun.images.recipes import labels

    spec = spec_file.spec
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(base["created"]))
    env = {"PATH": DEFAULT_PATH, **spec.env}
    return {
        "architecture": OCI_ARCH[arch], "os": "linux", "created": created,
        "config": {"Env": [f"{k}={v}" for k, v in sorted(env.items())], "Cmd": ["/bin/bash"],
                   "Labels": labels(spec_file, arch), "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [base["diff_id"], top_diff]},
        "history": [{"created": created, "created_by": " ".join(boot_argv[:-2] + ["ROOTFS", boot_argv[-1]])},
                    {"created": created, "created_by": "dlrun: harness, /etc/dlrun/image.json, mount points"}],
    }


@contextlib.contextmanager
def _exclusive(path: Path):
    """One build per cache and store at a time (two CI jobs on one machine share them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build(spec_file: SpecFile, arch: str, log: Log) -> dict:
    """Build (or confirm up to date) the image for `arch`; returns the lock fields to record."""
    spec = spec_file.spec
    with _exclusive(base_dir(spec, arch).parent / f".{base_dir(spec, arch).name}.lock"), \
            _exclusive(artifact_dir(spec.name, arch).parent / f".{arch}.build.lock"):
        return _build(spec_file, arch, log)


def _build(spec_file: SpecFile, arch: str, log: Log) -> dict:
    from dlrun.images import lock

    spec = spec_file.spec
    base = build_base(spec, arch, log)
    files = top_layer_files(spec_file, arch, base)
    top = top_layer_tar(files, base["created"])
    top_diff = bytes_sha256(top)
    config = image_config(spec_file, arch, base, top_diff, base["command"])
    image_id = "sha256:" + hashlib.sha256(canonical_json(config)).hexdigest()
    store = artifact_dir(spec.name, arch)
    rootfs, archive = rootfs_path(spec.name, arch), archive_path(spec.name, arch)
    known = lock.entry(spec.name, arch) or {}
    if (known.get("digest") == image_id and rootfs.is_dir() and archive.exists()
            and read_docker_archive(archive).image_id == image_id and tree_digest(rootfs) == known.get("rootfs")):
        log(f"image: up to date ({image_id[:19]}…), nothing to rebuild")
        return dict(known)

    store.mkdir(parents=True, exist_ok=True)
    tmp = store / "rootfs.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    run_command(Command(["cp", "-al", str(base_dir(spec, arch) / "rootfs"), str(tmp)]), quiet=True)
    _write_top(tmp, files)
    rootfs_digest = tree_digest(tmp)
    if rootfs.exists():
        shutil.rmtree(rootfs)
    tmp.rename(rootfs)
    written = write_docker_archive(
        archive, config, [Layer(base["diff_id"], base_dir(spec, arch) / "layer.tar"), Layer(top_diff, None, top)],
        [spec.reference(arch)], base["created"])
    assert written == image_id
    harness = {f.path.rsplit("/", 1)[-1]: bytes_sha256(f.data) for f in files
               if f.data is not None and f.path.endswith(".py")}
    log(f"image: {image_id} ({archive.stat().st_size / 1e9:.2f} GB archive, rootfs {rootfs_digest[:19]}…)")
    return {"digest": image_id, "rootfs": rootfs_digest, "layers": [base["diff_id"], top_diff],
            "spec_sha256": spec_file.sha256, "packages": base["packages"], "harness_sha256": harness,
            "size_bytes": archive.stat().st_size, "recorded_by": "build (debootstrap)",
            **({"built_emulated_on": base["built_on"]} if base.get("emulated") else {})}
