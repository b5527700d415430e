"""Session fixtures for the real Docker engine: private `dockerd` daemons (each its own socket, data root, exec
root and pid file; no iptables, no bridge), and cpu-reference loaded into one.

Storage: overlay2 where the kernel lets this process mount it, else vfs (`DLRUN_TEST_DOCKER_STORAGE` chooses
one). vfs works everywhere but copies the whole image for every container and every layer: measured here,
starting a cpu-reference container took 15-30 s with vfs and 0.5 s with overlay2.

A daemon started without a bridge has the `host` and `none` networks only: the `docker` runtime's ranks run
with the host's (their rendezvous and the fabric need it), and a test container that needs no network runs
with `--network none`. Every daemon started here is stopped when the session ends, the containers it still
runs with it, and its data root is removed: nothing outlives the session.

`docker_daemons(name)` starts (once per session) the daemon of one site or machine; `dockerd` is site A's.
Nothing here skips: a missing tool fails the test with what to install.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fixtures_images import dlrun

#: What the daemon needs, and the Debian package of each (`make sysdeps` installs them).
DOCKER_TOOLS = {"dockerd": "docker.io", "containerd": "containerd", "runc": "runc", "docker-init": "tini",
                "docker": "docker.io"}
START_S = 60
STORAGE_DRIVERS = ("overlay2", "vfs")


def require_docker() -> None:
    missing = [f"{tool} (apt-get install {package})" for tool, package in DOCKER_TOOLS.items()
               if shutil.which(tool) is None]
    if missing:
        pytest.fail("the Docker engine tests need: " + "; ".join(missing) + " (`make sysdeps` installs them)",
                    pytrace=False)


class Daemon:
    """One private dockerd: `url` is its DOCKER_HOST, `env` what a client (dlrun, the docker CLI) needs."""

    def __init__(self, work: Path, name: str):
        self.name, self.work = name, work
        self.sock = work / "docker.sock"
        self.url = f"unix://{self.sock}"
        # DOCKER_CONFIG: the CLI's own state (contexts, credentials) stays out of the user's ~/.docker
        self.env = {"DOCKER_HOST": self.url, "DOCKER_CONFIG": str(work / "client")}
        self.log_path = work / "dockerd.log"
        self.proc: subprocess.Popen | None = None
        self.storage_driver = ""

    def start(self) -> "Daemon":
        chosen = os.environ.get("DLRUN_TEST_DOCKER_STORAGE")
        for driver in (chosen,) if chosen else STORAGE_DRIVERS:
            if self._start(driver):
                self.storage_driver = driver
                return self
        pytest.fail(f"dockerd ({self.name}) did not start with {' or '.join((chosen,) if chosen else STORAGE_DRIVERS)}"
                    f" storage: {self.log_path.read_text()[-3000:]}", pytrace=False)

    def _start(self, driver: str) -> bool:
        argv = ["dockerd", "--host", self.url, "--data-root", str(self.work / "root"),
                "--exec-root", str(self.work / "exec"), "--pidfile", str(self.work / "docker.pid"),
                "--iptables=false", "--ip6tables=false", "--bridge=none", f"--storage-driver={driver}"]
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        deadline = time.monotonic() + START_S
        while self.client_ping() is False:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()  # e.g. "driver not supported": the next driver starts in a clean data root
                return False
            time.sleep(0.2)
        return True

    def client_ping(self) -> bool:
        if not self.sock.exists():
            return False
        import docker

        try:
            return bool(docker.DockerClient(base_url=self.url, timeout=5).ping())
        except Exception:  # docker.errors.DockerException, requests' ConnectionError: not up yet
            return False

    def client(self):
        import docker

        return docker.DockerClient(base_url=self.url, timeout=600)

    def cli(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.env})

    def stop(self) -> None:
        """The daemon and every container it runs; then its data root (vfs keeps a full copy per layer)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                for container in self.client().containers.list(all=True):
                    container.remove(force=True)
            except Exception:  # a daemon that no longer answers: its processes are ended below
                pass
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        for mount in reversed(_mounts_under(self.work)):
            subprocess.run(["umount", "-l", mount], capture_output=True)
        shutil.rmtree(self.work / "root", ignore_errors=True)


def _mounts_under(folder: Path) -> list[str]:
    prefix = str(folder.resolve()) + "/"
    with open("/proc/self/mounts") as mounts:
        return [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]


@pytest.fixture(scope="session")
def docker_daemons(tmp_path_factory):
    """`get(name)`: the private dockerd of one site or machine, started on first use; all stop at the end."""
    require_docker()
    started: dict[str, Daemon] = {}

    def get(name: str) -> Daemon:
        if name not in started:
            started[name] = Daemon(tmp_path_factory.mktemp(f"dockerd-{name}"), name).start()
        return started[name]

    try:
        yield get
    finally:
        for daemon in started.values():
            daemon.stop()


@pytest.fixture(scope="session")
def dockerd(docker_daemons) -> Daemon:
    """Site A's daemon."""
    return docker_daemons("site-a")


@pytest.fixture(scope="session")
def cpu_reference_in_docker(cpu_reference, dockerd):
    """cpu-reference's Docker archive loaded into site A's daemon by `dlrun images load --engine docker`, with
    the seconds it took (vfs writes the whole 1.4 GB layer)."""
    env = {**cpu_reference["env"], **dockerd.env}
    started = time.time()
    proc = dlrun("images", "load", str(cpu_reference["archive"]), "--engine", "docker", env=env)
    assert proc.returncode == 0, f"load into dockerd failed:\n{proc.stdout}\n{proc.stderr}"
    return {**cpu_reference, "env": env, "daemon": dockerd, "load_seconds": round(time.time() - started, 1),
            "load_entry": json.loads(proc.stdout[proc.stdout.index("{"):])}
