"""Session fixtures for the real image tests: cpu-reference built with debootstrap (cached between CI runs
on the same machine), and Podman's Docker-compatible API service on a private socket.

Nothing here skips: a missing tool fails the test with what to install.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Reused by later CI runs on the same machine: the bootstrapped Debian tree (about 1.6 GB) and the image
# store. DLRUN_CI_CACHE moves it (e.g. for a user without write access to /var/cache).
CI_CACHE = Path(os.environ.get("DLRUN_CI_CACHE", "/var/cache/dlrun-ci"))
# Podman on Debian 12 CI machines works with runc and cgroupfs only.
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
netns = "host"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""
TOOLS = {"debootstrap": "apt-get install debootstrap", "ch-run": "apt-get install charliecloud",
         "ch-image": "apt-get install charliecloud-builders",
         "podman": "apt-get install podman runc", "tar": "apt-get install tar"}


#: `make test` sets it: the emulated ppc64le build (the suite's slowest step, about 11 minutes cold) starts
#: when the session does, at low priority beside the tests, instead of when the first test needs it; that
#: test's fixture then waits on the build's lock and finds the image up to date.
PREBUILD = "DLRUN_PREBUILD_FOREIGN"
_prebuild: list[subprocess.Popen] = []


def pytest_sessionstart(session):
    if os.environ.get(PREBUILD) != "1" or hasattr(session.config, "workerinput") or os.geteuid() != 0:
        return  # only the controlling process, once; without root the fixture says what it needs
    CI_CACHE.mkdir(parents=True, exist_ok=True)
    log = open(CI_CACHE / "prebuild-ppc64le.log", "w")
    _prebuild.append(subprocess.Popen(
        ["nice", "-n", "10", sys.executable, "-m", "dlrun.cli", "images", "build", "cpu-reference", "--engine",
         "charliecloud", "--arch", "ppc64le"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, **image_env()}))
    log.close()


def pytest_sessionfinish(session):
    """No build outlives the suite: a build still running (the image tests were not run) is ended."""
    for proc in _prebuild:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def require_tools(*names: str) -> None:
    missing = [f"{name} ({TOOLS.get(name, 'install it')})" for name in names if shutil.which(name) is None]
    if missing:
        pytest.fail("the image integration tests need: " + "; ".join(missing) + " (`make sysdeps` installs them)",
                    pytrace=False)


def image_env(cache: Path = CI_CACHE) -> dict[str, str]:
    return {"DLRUN_CACHE_DIR": str(cache), "DLRUN_IMAGES_DIR": str(cache / "images"),
            "DLRUN_IMAGES_LOCK": str(cache / "images.lock"), "USER": os.environ.get("USER") or "root"}


def dlrun(*args: str, env: dict[str, str] | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dlrun.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture(scope="session")
def cpu_reference():
    """cpu-reference for this machine's architecture: built (or found up to date) in the CI cache."""
    if os.geteuid() != 0:
        pytest.fail("building cpu-reference with debootstrap needs root (CI runs as root)", pytrace=False)
    require_tools("debootstrap", "ch-run", "tar")
    env = image_env()
    CI_CACHE.mkdir(parents=True, exist_ok=True)
    started = time.time()
    proc = dlrun("images", "build", "cpu-reference", "--engine", "charliecloud", env=env)
    seconds = time.time() - started
    assert proc.returncode == 0, f"build failed:\n{proc.stdout}\n{proc.stderr}"
    entry = json.loads(proc.stdout)
    from dlrun.images.spec import host_arch

    arch = host_arch()
    store = CI_CACHE / "images" / "cpu-reference" / arch
    return {"env": env, "entry": entry, "arch": arch, "rootfs": store / "rootfs", "archive": store / "image.tar",
            "build_seconds": round(seconds, 1), "build_log": proc.stderr}


@pytest.fixture(scope="session")
def cpu_reference_ppc64le():
    """cpu-reference for ppc64le, built on this x86_64 machine by emulation (qemu-user through binfmt_misc: the
    foreign packages' scripts run under it) in the CI cache; the slowest fixture of the suite (about 10
    minutes cold), made once per session and reused by every test that needs it."""
    if os.geteuid() != 0:
        pytest.fail("building cpu-reference with debootstrap needs root (CI runs as root)", pytrace=False)
    require_tools("debootstrap", "ch-run", "tar")
    env = image_env()
    started = time.time()
    proc = dlrun("images", "build", "cpu-reference", "--engine", "charliecloud", "--arch", "ppc64le", env=env,
                 timeout=3600)
    assert proc.returncode == 0, f"emulated build failed:\n{proc.stdout}\n{proc.stderr}"
    store = CI_CACHE / "images" / "cpu-reference" / "ppc64le"
    return {"env": env, "entry": json.loads(proc.stdout), "arch": "ppc64le", "rootfs": store / "rootfs",
            "archive": store / "image.tar", "build_seconds": round(time.time() - started, 1),
            "build_log": proc.stderr}


@pytest.fixture(scope="session")
def podman_service(tmp_path_factory):
    """`podman system service` on a private socket; yields the DOCKER_HOST URL and the env Podman needs."""
    require_tools("podman")
    work = tmp_path_factory.mktemp("podman")
    conf = work / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    sock = work / "podman.sock"
    url = f"unix://{sock}"
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    log = open(work / "service.log", "w")
    proc = subprocess.Popen(["podman", "system", "service", "--time=0", url], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 60
        while not sock.exists():
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"podman system service did not start: {(work / 'service.log').read_text()}",
                            pytrace=False)
            time.sleep(0.2)
        import docker

        client = docker.DockerClient(base_url=url)
        client.ping()
        yield {"url": url, "env": {"CONTAINERS_CONF": str(conf), "DOCKER_HOST": url}, "client": client}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="session")
def cpu_reference_in_podman(cpu_reference, podman_service):
    """The same image loaded into Podman through the Docker API (skipped when Podman already has its ID)."""
    env = {**cpu_reference["env"], **podman_service["env"]}
    started = time.time()
    proc = dlrun("images", "load", str(cpu_reference["archive"]), "--engine", "podman", "--host",
                 podman_service["url"], env=env)
    assert proc.returncode == 0, f"load into podman failed:\n{proc.stdout}\n{proc.stderr}"
    return {**cpu_reference, "env": env, "load_seconds": round(time.time() - started, 1), "load_log": proc.stderr}
