"""Download the pure-Python wheels dlrun needs on the GPU machine, for its Python 3.12, into DEST (`make
gpu-wheels`: .whl/, which git ignores), and check that every requirement they declare (Requires-Dist, for
Python 3.12 on Linux, extras left out) is among them or on that machine already.

The GPU machine has no network: bench/gpu.sh unpacks these with `pip install --no-index --no-deps --target`.
The versions are the ones this checkout's environment runs (so the GPU machine runs what the tests ran).
"""
from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

#: What dlrun imports that the GPU machine lacks (pydantic) and what pydantic requires.
CARRIED = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions")
#: What the GPU machine has (see the project's environment notes): enough for dlrun's other imports.
ON_THE_MACHINE = ("typer", "rich", "pyyaml", "torch", "numpy", "nvidia-ml-py", "pandas", "matplotlib", "pytest")
TARGET = {"python_version": "3.12", "python_full_version": "3.12.3", "implementation_name": "cpython",
          "platform_python_implementation": "CPython", "sys_platform": "linux", "platform_system": "Linux",
          "os_name": "posix", "platform_machine": "x86_64", "extra": ""}


def download(dest: Path) -> list[str]:
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in CARRIED]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", "--platform", "manylinux_2_17_x86_64",
                    "-d", str(dest), *pins], check=True)
    return pins


def requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode()
    return [Requirement(line.split(":", 1)[1].strip()) for line in text.splitlines() if line.startswith("Requires-Dist:")]


def unmet(dest: Path) -> list[str]:
    """Requirements of the carried wheels that neither they nor the machine meet (for Python 3.12)."""
    wheels = sorted(dest.glob("*.whl"))
    have = {canonicalize_name(w.name.split("-")[0]): w.name.split("-")[1] for w in wheels}
    missing = []
    for wheel in wheels:
        for req in requirements(wheel):
            if req.marker is not None and not Marker(str(req.marker)).evaluate(TARGET):
                continue
            name = canonicalize_name(req.name)
            if name in ON_THE_MACHINE:
                continue
            if name not in have or not req.specifier.contains(have[name], prereleases=True):
                missing.append(f"{wheel.name} requires {req} (carried: {have.get(name, 'none')})")
    return missing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("dest", type=Path, nargs="?", default=Path(".whl"))
    args = parser.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)
    pins = download(args.dest)
    missing = unmet(args.dest)
    for line in missing:
        print(f"gpu-wheels: {line}", file=sys.stderr)
    print(f"gpu-wheels: {len(pins)} wheels for Python 3.12 in {args.dest}: {', '.join(pins)}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
