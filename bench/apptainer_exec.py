"""What Apptainer costs the tests (not part of `make bench`): one `apptainer exec` of cpu-reference's SIF that
imports torch, with the SIF mounted by squashfuse (Apptainer's way when squashfuse is installed) and unpacked
to a temporary sandbox first (`--unsquash`, its way without squashfuse), alternated; with `--build`, also the
SIF build from the Docker archive with Apptainer's default gzip and with the tests' zstd level 3.

    DLRUN_TEST_APPTAINER_ROOT=<root that tests/apptainer/prepare-root.sh made> \\
    DLRUN_IMAGES_DIR=<image store holding cpu-reference> python bench/apptainer_exec.py [--rounds N] [--build]

Prints one JSON line: per variant the wall and CPU seconds (user + system of every process) of each round.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

from common import REPO_ROOT, cpu_seconds, median, processor, processor_label

SHIMS = REPO_ROOT / "tests" / "apptainer"
IMPORT_TORCH = ["python3", "-c", "import torch"]


def store() -> Path:
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine())
    return Path(os.environ["DLRUN_IMAGES_DIR"]) / "cpu-reference" / arch


def measure(argv: list[str], env: dict[str, str]) -> dict[str, float]:
    cpu, _, wall = cpu_seconds(argv, env=env)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}


def rounds(variants: dict[str, list[str]], count: int, env: dict[str, str]) -> dict[str, list[dict[str, float]]]:
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for done in range(count):
        for name, argv in list(variants.items())[::-1 if done % 2 else 1]:
            samples[name].append(measure(argv, env))
            print(f"  round {done + 1}/{count} {name}: {samples[name][-1]}", file=sys.stderr)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--build", action="store_true", help="also time the SIF build, gzip and zstd (minutes)")
    args = parser.parse_args()
    if not os.environ.get("DLRUN_TEST_APPTAINER_ROOT") or not os.environ.get("DLRUN_IMAGES_DIR"):
        parser.error("set DLRUN_TEST_APPTAINER_ROOT and DLRUN_IMAGES_DIR (see the module's docstring)")
    env = {**os.environ, "PATH": f"{SHIMS}{os.pathsep}{os.environ['PATH']}"}
    sif = store() / "cpu-reference.sif"
    variants = {"squashfuse": ["apptainer", "exec", str(sif), *IMPORT_TORCH],
                "unsquash": ["apptainer", "exec", "--unsquash", str(sif), *IMPORT_TORCH]}
    result = {"processor": processor_label(processor()), "load_before": os.getloadavg(),
              "exec": rounds(variants, args.rounds, env)}
    if args.build:
        with tempfile.TemporaryDirectory(dir=store()) as out:
            archive = f"docker-archive://{store() / 'image.tar'}"
            builds = {compression: ["env", f"APPTAINER_MKSQUASHFS_ARGS={flags}", "apptainer", "build", "--force",
                                    f"{out}/{compression}.sif", archive]
                      for compression, flags in (("gzip", "-comp gzip"), ("zstd-3", "-comp zstd -Xcompression-level 3"))}
            result["build"] = rounds(builds, 1, env)
            result["build_bytes"] = {name: Path(f"{out}/{name}.sif").stat().st_size for name in builds}
    result["load_after"] = os.getloadavg()
    result["median_wall_s"] = {kind: {name: median([s["wall_s"] for s in samples]) for name, samples in part.items()}
                               for kind, part in result.items() if kind in ("exec", "build")}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
