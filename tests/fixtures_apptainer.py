"""Session fixtures for the real Apptainer tests: Debian sid's Apptainer in its own root (tests/apptainer/:
`prepare-root.sh` makes the root once, cached in the CI cache beside the other image caches; the `apptainer`
and `singularity` commands there enter it), cpu-reference's SIF built by it, and a loopback image registry.

Nothing here skips: a missing tool fails the test with what to install.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from fixtures_images import CI_CACHE, dlrun
from loopback import free_port

SHIMS = Path(__file__).resolve().parent / "apptainer"
#: the Debian sid root the shims run Apptainer from (about 270 MB)
APPTAINER_ROOT = CI_CACHE / "apptainer-sid"
#: Apptainer's own setting for what its builds pass mksquashfs (the environment form of `build
#: --mksquashfs-args`): zstd at level 3 instead of Apptainer's default gzip. Squashing cpu-reference's 1.6 GB
#: tree took 512 s (157 CPU-s) with gzip on a loaded 2-core build machine, 17 s (7 CPU-s) with this, for a
#: 493 MB file instead of 479 MB (bench/RESULTS.md); squashfuse and kernels since 4.14 read both.
MKSQUASHFS_ARGS = "-comp zstd -Xcompression-level 3"
INSTALL = {"debootstrap": "debootstrap", "unshare": "util-linux", "pivot_root": "util-linux",
           "docker-registry": "docker-registry"}


def require_tools(*names: str) -> None:
    missing = [f"{name} (apt-get install {INSTALL[name]})" for name in names if shutil.which(name) is None]
    if missing:
        pytest.fail("the Apptainer tests need: " + "; ".join(missing) + " (`make sysdeps` installs them)",
                    pytrace=False)


@pytest.fixture(scope="session")
def apptainer(tmp_path_factory):
    """The environment that puts the real Apptainer on PATH as `apptainer` and `singularity`, and what
    preparing its root took (`cold`: it was made now, not found in the cache)."""
    if os.geteuid() != 0:
        pytest.fail("the Apptainer tests need root (debootstrap; unshare and pivot_root to enter the sid root)",
                    pytrace=False)
    require_tools("debootstrap", "unshare", "pivot_root")
    cold = not (APPTAINER_ROOT / ".dlrun-ready").exists()
    started = time.time()
    proc = subprocess.run([str(SHIMS / "prepare-root.sh"), str(APPTAINER_ROOT)], capture_output=True, text=True,
                          timeout=1800)
    assert proc.returncode == 0, f"preparing the Apptainer root failed:\n{proc.stdout}\n{proc.stderr}"
    work = tmp_path_factory.mktemp("apptainer")
    env = {"PATH": f"{SHIMS}:{os.environ['PATH']}", "DLRUN_TEST_APPTAINER_ROOT": str(APPTAINER_ROOT),
           "APPTAINER_CACHEDIR": str(work / "cache"), "APPTAINER_MKSQUASHFS_ARGS": MKSQUASHFS_ARGS}
    version = subprocess.run(["apptainer", "--version"], capture_output=True, text=True, env={**os.environ, **env})
    assert version.returncode == 0, version.stderr
    return {"env": env, "root": APPTAINER_ROOT, "cold": cold, "prepare_seconds": round(time.time() - started, 1),
            "ready": (APPTAINER_ROOT / ".dlrun-ready").read_text(), "version": version.stdout.strip()}


@pytest.fixture(scope="session")
def cpu_reference_sif(cpu_reference, apptainer):
    """cpu-reference's SIF, built by `dlrun images build --engine apptainer` (from the Docker archive of the
    debootstrap build) in the CI cache's image store; a later session finds it up to date."""
    env = {**cpu_reference["env"], **apptainer["env"]}
    started = time.time()
    proc = dlrun("images", "build", "cpu-reference", "--engine", "apptainer", env=env)
    assert proc.returncode == 0, f"SIF build failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    store = Path(env["DLRUN_IMAGES_DIR"]) / "cpu-reference" / cpu_reference["arch"]
    return {**cpu_reference, "env": env, "entry": json.loads(proc.stdout), "sif": store / "cpu-reference.sif",
            "sif_seconds": round(time.time() - started, 1), "sif_log": proc.stderr}


@pytest.fixture(scope="session")
def apptainer_registry(tmp_path_factory):
    """Debian's docker-registry (the CNCF distribution registry) on a free loopback port; yields its
    `address` (HOST:PORT). Anything that yields the same serves: the registry fixture the Docker tests
    start can stand in for it."""
    require_tools("docker-registry")
    work = tmp_path_factory.mktemp("registry")
    port = free_port()
    config = work / "config.yml"
    config.write_text(f"version: 0.1\nlog: {{level: warn}}\nstorage: {{filesystem: {{rootdirectory: {work / 'data'}}}}}\n"
                      f"http: {{addr: 127.0.0.1:{port}}}\n")
    log = open(work / "registry.log", "w")
    proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail(f"docker-registry did not start: {(work / 'registry.log').read_text()}", pytrace=False)
                time.sleep(0.1)
        yield {"address": f"127.0.0.1:{port}", "root": work / "data"}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
