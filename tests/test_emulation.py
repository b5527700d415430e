"""What decides that code runs emulated, without an image: the ELF header of an executable, the CPU the
kernel's /proc/cpuinfo describes, the binfmt_misc handler's state, and what `--arch` may ask for. The real
emulated build and runs are tests/test_foreign_arch.py."""
from __future__ import annotations

import shutil
import struct
import sys

import pytest

from dlrun.harness.harness_node import arch_facts, elf_arch, kernel_arch
from dlrun.images import emulation

# /proc/cpuinfo's first block as each kernel prints it (abridged to the lines that tell the architecture).
X86 = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 167\nflags\t\t: fpu sse2 lm\n\n"
POWER9 = "processor\t: 0\ncpu\t\t: POWER9, altivec supported\nclock\t\t: 3800.000000MHz\nrevision\t: 2.2 (pvr 004e 1202)\n\n"
NEOVERSE = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n\n"


def elf(tmp_path, machine: int, order: int) -> str:
    """An ELF header of `machine` in byte order `order` (1 little, 2 big), as the kernel reads it."""
    path = tmp_path / f"elf-{machine}-{order}"
    endian = "<" if order == 1 else ">"
    path.write_bytes(b"\x7fELF" + bytes([2, order, 1]) + bytes(9) + struct.pack(endian + "HH", 2, machine) + bytes(44))
    return str(path)


def test_the_elf_header_names_the_architecture(tmp_path):
    assert elf_arch(sys.executable) == elf_arch(shutil.which("ls")) == "x86_64"  # this machine's own programs
    assert elf_arch(elf(tmp_path, 21, 1)) == "ppc64le" and elf_arch(elf(tmp_path, 21, 2)) == "ppc64"
    assert elf_arch(elf(tmp_path, 183, 1)) == "aarch64"
    assert elf_arch(elf(tmp_path, 9999, 1)) == "elf-machine-9999"
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    assert elf_arch(str(script)) is None and elf_arch(str(tmp_path / "none")) is None


def test_the_kernels_cpu_decides_and_a_mismatch_is_emulation(tmp_path):
    assert (kernel_arch(X86), kernel_arch(POWER9), kernel_arch(NEOVERSE), kernel_arch("")) == \
        ("x86_64", "ppc64le", "aarch64", None)
    ppc = elf(tmp_path, 21, 1)
    assert arch_facts(ppc, X86) == {"arch": "ppc64le", "host_arch": "x86_64", "emulated": True}
    assert arch_facts(ppc, POWER9) == {"arch": "ppc64le", "host_arch": "ppc64le", "emulated": False}
    assert arch_facts(sys.executable, X86)["emulated"] is False
    # a kernel whose /proc/cpuinfo says nothing of its architecture: the code's own, never a guess of emulation
    assert arch_facts(ppc, "processor\t: 0\n") == {"arch": "ppc64le", "host_arch": "ppc64le", "emulated": False}


def test_the_handler_must_be_there_enabled_and_fixed(tmp_path):
    assert emulation.handler_state("x86_64", tmp_path) is None  # this machine's own architecture
    assert emulation.handler_state("ppc64le", tmp_path) == f"binfmt_misc is not mounted at {tmp_path}"
    (tmp_path / "status").write_text("enabled\n")
    assert emulation.handler_state("ppc64le", tmp_path) == f"no qemu-ppc64le handler is registered in {tmp_path}"
    handler = tmp_path / "qemu-ppc64le"
    handler.write_text("disabled\ninterpreter /usr/libexec/qemu-binfmt/ppc64le-binfmt-P\nflags: PF\n")
    assert "is disabled" in emulation.handler_state("ppc64le", tmp_path)
    handler.write_text("enabled\ninterpreter /usr/bin/qemu-ppc64le\nflags: \n")
    assert "lacks the F flag" in emulation.handler_state("ppc64le", tmp_path)
    handler.write_text("enabled\ninterpreter /usr/libexec/qemu-binfmt/ppc64le-binfmt-P\nflags: PF\noffset 0\n")
    assert emulation.handler_state("ppc64le", tmp_path) is None


def test_a_machine_that_cannot_emulate_gets_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(emulation, "BINFMT", tmp_path)  # nothing mounted there, and not root's to mount
    monkeypatch.setattr(emulation.os, "geteuid", lambda: 1000)
    with pytest.raises(emulation.DlrunError) as raised:
        emulation.ensure("aarch64")
    message = str(raised.value)
    assert "\n" not in message and message.startswith("this x86_64 machine cannot run aarch64 code: binfmt_misc")
    assert emulation.INSTALL in message


def test_the_tree_interpreter_is_read_inside_the_tree(tmp_path):
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "usr" / "bin" / "python3.11").write_bytes(open(elf(tmp_path, 21, 1), "rb").read())
    (tmp_path / "usr" / "bin" / "python3").symlink_to("python3.11")
    assert emulation.rootfs_arch(tmp_path) == "ppc64le"
    (tmp_path / "usr" / "bin" / "python3").unlink()
    (tmp_path / "usr" / "bin" / "python3").symlink_to("/usr/bin/python3.11")  # absolute: inside the tree
    assert emulation.rootfs_arch(tmp_path) == "ppc64le"


@pytest.mark.parametrize("argv,message", [
    (["--arch", "s390x"], "--arch"),
    (["--image", "host", "--arch", "ppc64le"], "--arch ppc64le: image 'host' is the host's own software"),
    (["--image", "pytorch2.6-ngc24.12", "--arch", "ppc64le"], "is built for x86_64"),
])
def test_an_arch_no_image_or_host_can_run_is_one_line(dlrun_home, cli, argv, message):
    proc = cli("run", "trivial", *argv, "--dry-run")
    assert proc.returncode == 2 and message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_the_rendered_job_runs_the_image_of_the_asked_architecture(dlrun_home, cli):
    proc = cli("run", "trivial", "--image", "cpu-reference", "--arch", "aarch64", "--runtime", "docker", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "localhost/dlrun/cpu-reference:aarch64" in proc.stdout
    build = cli("images", "build", "cpu-reference", "--engine", "charliecloud", "--arch", "aarch64", "--dry-run")
    assert build.returncode == 0 and "debootstrap --variant=minbase --arch=arm64" in build.stdout, build.stderr
