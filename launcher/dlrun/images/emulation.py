"""Running another architecture's code on this machine: qemu-user through the kernel's binfmt_misc.

An image for ppc64le or aarch64 is built (its Debian packages' scripts run in the foreign tree) and run
(Charliecloud, Podman, Docker start its interpreter like any program) on an x86_64 host when the kernel hands
that architecture's ELF files to a qemu-user interpreter. The handler must be registered with the `F` flag
(the kernel opens the interpreter when it is registered), so it works inside a container or chroot that has
no qemu binary of its own; Debian's qemu-user-static registers its handlers so.

`ensure` checks that, and where it may (root, binfmt-support installed) mounts binfmt_misc and enables the
handler; a machine that cannot emulate gets one line saying what to install. What a run executed as is
detected by the harness (dlrun.harness.harness_node.arch_facts), never assumed from what was asked: an
emulated run proves that an image works, never how fast that architecture is.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from dlrun.errors import DlrunError
from dlrun.harness.harness_node import elf_arch
from dlrun.images.spec import host_arch

BINFMT = Path("/proc/sys/fs/binfmt_misc")
#: dlrun's architecture -> the binfmt handler Debian's qemu-user-static registers for it.
HANDLER = {"x86_64": "qemu-x86_64", "ppc64le": "qemu-ppc64le", "aarch64": "qemu-aarch64"}
INSTALL = "apt-get install qemu-user-static binfmt-support"
Log = Callable[[str], None]


def handler_state(arch: str, binfmt: Path | None = None) -> str | None:
    """None where this machine runs `arch` code (natively, or through an enabled qemu handler that the kernel
    opened at registration: flag F), else what is missing, in words."""
    binfmt = binfmt or BINFMT
    if arch == host_arch():
        return None
    entry = binfmt / HANDLER[arch]
    if not (binfmt / "status").exists():
        return f"binfmt_misc is not mounted at {binfmt}"
    if not entry.exists():
        return f"no {HANDLER[arch]} handler is registered in {binfmt}"
    text = entry.read_text()
    if not text.startswith("enabled"):
        return f"the {HANDLER[arch]} handler in {binfmt} is disabled"
    flags = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("flags:")), "")
    if "F" not in flags:
        return (f"the {HANDLER[arch]} handler in {binfmt} lacks the F flag (its interpreter would have to exist "
                "inside every container); register it from qemu-user-static")
    return None


def _try_register(arch: str, log: Log) -> None:
    if os.geteuid() != 0:
        return
    if not (BINFMT / "status").exists():
        subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)], capture_output=True)
    if not (BINFMT / HANDLER[arch]).exists() and shutil.which("update-binfmts"):
        proc = subprocess.run(["update-binfmts", "--enable", HANDLER[arch]], capture_output=True, text=True)
        if proc.returncode == 0:
            log(f"emulation: enabled the {HANDLER[arch]} handler (update-binfmts)")


def ensure(arch: str, log: Log = lambda _: None) -> bool:
    """Make sure this machine can run `arch` code; True where it is emulated, False where native. Raises a
    one-line error saying what to install where it cannot."""
    if handler_state(arch) is None:
        return arch != host_arch()
    _try_register(arch, log)
    problem = handler_state(arch)
    if problem is not None:
        raise DlrunError(f"this {host_arch()} machine cannot run {arch} code: {problem}. Install Debian's "
                         f"qemu-user-static and binfmt-support ({INSTALL}; as root, with binfmt_misc mounted), "
                         f"or build and run on a {arch} node")
    return True


def rootfs_arch(rootfs: Path) -> str | None:
    """The architecture an unpacked image's interpreter is built for (its /usr/bin/python3, else /bin/sh),
    resolving links inside the tree, never on the host."""
    for name in ("usr/bin/python3", "bin/sh", "usr/bin/sh"):
        path = rootfs / name
        for _ in range(16):
            if not path.is_symlink():
                break
            target = os.readlink(path)
            path = (rootfs / target.lstrip("/")) if target.startswith("/") else path.parent / target
        found = elf_arch(path)
        if found:
            return found
    return None
