"""What an image operation does, as data: `--dry-run` prints it, execution runs exactly it.

A `Command` runs a program; an `ApiCall` is a Docker-API request made with docker-py, printed as the
`docker` command line that does the same, with the API endpoint it goes to.
"""
from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from dlrun.errors import DlrunError
from dlrun.registry import Tool

#: Every program the image engines and the runtime checks run, and how to get it (one place, so an engine's
#: declaration and the error for a missing program say the same).
TOOLS = {tool.command: tool for tool in (
    Tool("singularity", "install SingularityCE (https://docs.sylabs.io/guides/latest/admin-guide/installation.html) "
                        "or use --engine apptainer"),
    Tool("apptainer", "install Apptainer (Debian/Ubuntu: the apptainer package from the Apptainer PPA or GitHub "
                      "releases; EL: `dnf install apptainer` from EPEL)"),
    Tool("debootstrap", "apt-get install debootstrap"),
    Tool("ch-run", "apt-get install charliecloud (or build it from https://github.com/hpc/charliecloud)"),
    Tool("ch-image", "apt-get install charliecloud-builders"),
    Tool("ch-convert", "apt-get install charliecloud-builders"),
    Tool("enroot", "install enroot: the .deb/.rpm packages of https://github.com/NVIDIA/enroot/releases "
                   "(doc/installation.md), and pyxis for Slurm"),
    Tool("tar", "apt-get install tar"),
    Tool("cp", "apt-get install coreutils"),
    Tool("mkdir", "apt-get install coreutils"),
    Tool("rm", "apt-get install coreutils"),
    Tool("mv", "apt-get install coreutils"),
    Tool("docker", "install Docker Engine (https://docs.docker.com/engine/install/), or use --runtime podman or "
                   "docker-api"),
    Tool("dockerd", "install Docker Engine (https://docs.docker.com/engine/install/) and start it; dlrun drives "
                    "its API with docker-py (pip install 'dlrun[images]')"),
    Tool("podman", "apt-get install podman"),
)}


def tools(*commands: str) -> tuple[Tool, ...]:
    return tuple(TOOLS[command] for command in commands)


@dataclass(frozen=True)
class Command:
    argv: list[str]
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    note: str | None = None

    def text(self) -> str:
        prefix = f"cd {shlex.quote(self.cwd)} && " if self.cwd else ""
        env = "".join(f"{k}={shlex.quote(v)} " for k, v in sorted(self.env.items()))
        line = prefix + env + shlex.join(self.argv)
        return f"{line}    # {self.note}" if self.note else line


@dataclass(frozen=True)
class Note:
    """A step dlrun does itself (no external command), printed as a comment."""

    text_: str

    def text(self) -> str:
        return f"# {self.text_}"


@dataclass(frozen=True)
class ApiCall:
    equivalent: list[str]  # the docker CLI command that does the same
    endpoint: str

    def text(self) -> str:
        return f"{shlex.join(self.equivalent)}    # via the Docker API at {self.endpoint} (docker-py)"


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        hint = TOOLS[name].install if name in TOOLS else f"install {name}"
        raise DlrunError(f"{name} is not installed (not on PATH); {hint}. "
                         "`--dry-run` prints the commands without running them")
    return path


def run_command(command: Command, *, quiet: bool = False) -> str:
    """Run a command, streaming its output to stderr unless `quiet`; return its stdout when quiet."""
    import os

    require_tool(command.argv[0])
    env = {**os.environ, **command.env}
    if quiet:
        proc = subprocess.run(command.argv, cwd=command.cwd, env=env, capture_output=True, text=True)
    else:
        proc = subprocess.run(command.argv, cwd=command.cwd, env=env, stdout=sys.stderr, stderr=sys.stderr)
    if proc.returncode != 0:
        detail = (proc.stderr or "").strip().splitlines()[-1:] if quiet else []
        raise DlrunError(f"`{shlex.join(command.argv)}` failed with exit code {proc.returncode}"
                         + (f": {detail[0]}" if detail else ""))
    return proc.stdout if quiet else ""
