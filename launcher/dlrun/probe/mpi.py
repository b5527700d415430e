"""The MPI on this node: flavour and version from `mpirun --version` (one parser for every use), Open MPI's
PMIx components and Slurm's MPI plugins."""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlrun import paths
from dlrun.files import FileSystemError, write_atomic
from dlrun.probe.tools import tool_output

#: `ompi_info --parsable` kept between processes (it takes about 0.3 s, most of a run's node inventory):
#: valid while the binary and the folder of its components are the ones it was read from.
OMPI_INFO_CACHE = "ompi-info.json"
#: What the cache keeps at most (Open MPI 4's output is about 18 kB; anything far larger is not cached).
OMPI_INFO_BUDGET = 1 << 20


@dataclass(frozen=True)
class MpiInfo:
    flavour: str  # openmpi | spectrum | hpcx | mpich | intel | mvapich2 | unknown
    version: str | None
    pmi: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        """Open MPI derivatives share the ORTE/PRRTE launch protocol; MPICH derivatives share hydra/PMI."""
        return {"spectrum": "openmpi", "hpcx": "openmpi", "openmpi": "openmpi",
                "intel": "mpich", "mvapich2": "mpich", "mpich": "mpich"}.get(self.flavour, self.flavour)

    @property
    def series(self) -> tuple[int, int] | None:
        match = re.match(r"(\d+)\.(\d+)", self.version or "")
        return (int(match.group(1)), int(match.group(2))) if match else None

    def describe(self) -> str:
        return f"{self.flavour} {self.version or '?'}" + (f" ({'+'.join(self.pmi)})" if self.pmi else "")


_VERSION_PATTERNS = [
    ("spectrum", r"IBM Spectrum MPI\)?\s*([\d.]+)"),
    ("intel", r"Intel\(R\) MPI Library.*?Version\s+([\w. ]+?)(?:\s+Build|$)"),
    ("mvapich2", r"MVAPICH2?\s+Version\s*:?\s*([\d][\d.a-z]*)"),
    ("hpcx", r"hpcx[- ]v?([\d.]+)"),
    ("openmpi", r"Open MPI\)?\s+v?([\d.]+\w*)"),
    ("mpich", r"HYDRA build details:[\s\S]*?Version:\s+([\d.a-z]+)"),
    ("mpich", r"MPICH Version:\s+([\d.a-z]+)"),
]


def parse_mpi_version(text: str | None) -> MpiInfo | None:
    """The output of `mpirun --version` (or a catalog string like `openmpi 4.0.1`) -> MpiInfo."""
    if not text or not text.strip():
        return None
    for flavour, pattern in _VERSION_PATTERNS:
        match = re.search(pattern, text, re.IGNORECASE)
        if match:
            return MpiInfo(flavour=flavour, version=match.group(1).strip())
    match = re.fullmatch(r"\s*(openmpi|spectrum|hpcx|mpich|intel|mvapich2)[\s-]+v?([\w.]+)\s*", text, re.IGNORECASE)
    if match:
        return MpiInfo(flavour=match.group(1).lower(), version=match.group(2))
    return MpiInfo(flavour="unknown", version=None)


@functools.lru_cache(maxsize=1)
def mpirun_version_text() -> str | None:
    """What `mpirun --version` prints here (None without mpirun); run once per process."""
    return tool_output(["mpirun", "--version"])


def host_mpi() -> MpiInfo | None:
    return parse_mpi_version(mpirun_version_text())


SLURM_PLUGIN_DIRS = ("/usr/lib/x86_64-linux-gnu/slurm-wlm", "/usr/lib64/slurm", "/usr/lib/slurm",
                     "/usr/lib/aarch64-linux-gnu/slurm-wlm", "/usr/lib/powerpc64le-linux-gnu/slurm-wlm")


def mpi_inventory() -> dict[str, Any]:
    text = mpirun_version_text()
    info = parse_mpi_version(text)
    pmix_components: list[str] = []
    if info and info.family == "openmpi":
        ompi = ompi_info_text()
        pmix_components = sorted({m.group(1) for m in re.finditer(r"mca:pmix:(\w+):version", ompi)})
    slurm_plugins = sorted({p.name[4:].split(".")[0] for d in SLURM_PLUGIN_DIRS for p in Path(d).glob("mpi_*.so")})
    return {"mpirun": shutil.which("mpirun"), "version_text": text.splitlines()[0] if text else None,
            "flavour": info.flavour if info else None, "version": info.version if info else None,
            "openmpi_pmix_components": pmix_components, "slurm_mpi_plugins": slurm_plugins}


def _stamp(path: str | None) -> list[Any] | None:
    """What identifies a file's or folder's contents for the cache: path, inode, size, modification time."""
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return [path, st.st_ino, st.st_size, st.st_mtime_ns] if st else None


def ompi_info_text() -> str:
    """`ompi_info --parsable` of the ompi_info on PATH, from the cache when its binary and its components' folder
    (`--path pkglibdir`: a component installed or removed changes the folder) are unchanged since it was read."""
    binary = shutil.which("ompi_info")
    if binary is None:
        return ""
    binary = os.path.realpath(binary)
    cache = paths.cache_home() / OMPI_INFO_CACHE
    try:
        kept = json.loads(cache.read_text()) if cache.stat().st_size <= 2 * OMPI_INFO_BUDGET else {}
    except (OSError, ValueError):
        kept = {}
    if isinstance(kept, dict) and kept.get("binary") == _stamp(binary) and kept.get("pkglibdir") \
            and kept["pkglibdir"] == _stamp(kept["pkglibdir"][0]) and isinstance(kept.get("text"), str):
        return kept["text"]
    text = tool_output([binary, "--parsable"], timeout=20) or ""
    where = tool_output([binary, "--parsable", "--path", "pkglibdir"], timeout=20) or ""
    match = re.search(r"^path:pkglibdir:(.+)$", where, re.MULTILINE)
    folder = _stamp(match.group(1).strip()) if match else None
    if text and folder and len(text) <= OMPI_INFO_BUDGET:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(cache, json.dumps({"binary": _stamp(binary), "pkglibdir": folder, "text": text}))
        except (OSError, FileSystemError):
            pass  # a read-only cache: read again next time
    return text
