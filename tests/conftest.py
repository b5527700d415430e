"""Shared fixtures. Backend-specific fixtures live in their own modules, listed in pytest_plugins."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# A run tunes its knobs the first time it meets a machine (dlrun.tune); only the tests of that tune.
os.environ["DLRUN_TUNE"] = "off"
# dlrun's tables take a terminal's width from COLUMNS where one is set (dlrun.cli.output); pytest-xdist's workers
# inherit COLUMNS=80 from their start, the plain pytest process none: a test that wants a width sets it itself.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)
pytest_plugins: list[str] = ["fixtures_slurm", "fixtures_netns", "fixtures_images", "fixtures_apptainer",
                            "fixtures_docker", "fixtures_registry", "fixtures_postgres"]
# The Ctrl-C tests signal dlrun processes the suite starts, as a terminal would. A shell that started the suite
# in the background (a non-interactive `make test &`) hands it SIGINT and SIGQUIT ignored, and an ignored signal
# stays ignored across exec in every child, where Python then installs no KeyboardInterrupt: those tests would
# wait on a process that can no longer be interrupted. A handler here is reset to the default by exec instead.
for _sig in (signal.SIGINT, signal.SIGQUIT):
    if signal.getsignal(_sig) is signal.SIG_IGN:
        signal.signal(_sig, signal.default_int_handler if _sig == signal.SIGINT else signal.SIG_DFL)
#: Fixtures that start a resource, and the marker every test using them gets (pyproject.toml lists the markers).
RESOURCE_FIXTURES = {"slurm_cluster": "slurm", "netns_cluster": "slurm", "cpu_reference_ppc64le": "containers",
                     "cpu_reference": "containers", "podman_service": "containers",
                     "apptainer": "containers", "apptainer_registry": "containers", "docker_daemons": "containers",
                     "registry": "containers"}
#: The markers `make check` leaves out.
RESOURCE_MARKERS = ("mpi", "slurm", "horovod", "tensorflow", "browser", "containers", "slow")


#: The resources whose tests run in one xdist worker (`make test` runs two): a session fixture that builds an
#: image or starts a cluster is made once, by the worker that runs every test needing it.
XDIST_GROUPS = {"containers": "images", "slurm": "slurm", "postgres": "postgres"}
#: The fixtures that reach the tests' PostgreSQL server (fixtures_postgres): their tests are marked `postgres`.
POSTGRES_FIXTURES = ("postgres_server", "postgres_url")


# tryfirst: xdist's worker adds each test's group to its node id in its own pytest_collection_modifyitems, which
# pluggy calls before a conftest's (the worker registers it later); the groups must be marked by then, or
# `--dist loadgroup` spreads every resource's tests over both workers and each makes the session fixtures again
# (as it did until 2026-12-03). pyproject.toml says why pytest is below 9.2.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture, marker in RESOURCE_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(marker)
        callspec = getattr(item, "callspec", None)
        if any(name in getattr(item, "fixturenames", ()) for name in POSTGRES_FIXTURES) or (
                callspec is not None and callspec.params.get("store_location") == "postgresql"):
            item.add_marker("postgres")  # one server per session: every test of it in one worker
        groups = [group for marker, group in XDIST_GROUPS.items() if item.get_closest_marker(marker)]
        if groups:
            item.add_marker(pytest.mark.xdist_group(groups[0]))


def pytest_runtest_logreport(report):
    """With DLRUN_TEST_TIMELINE set (`.ci/run` sets it), one JSON line per test phase: which xdist worker ran it,
    when it ended, how long it took (scripts/test-timeline.py sums them per worker: what bounds the suite's time)."""
    path = os.environ.get("DLRUN_TEST_TIMELINE")
    if path and not hasattr(report, "node"):  # xdist's controller gets each worker's report again, with .node
        line = json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "test": report.nodeid,
                           "phase": report.when, "seconds": round(report.duration, 3), "ended": report.stop,
                           "outcome": report.outcome})
        with open(path, "a") as out:  # one short write per line: the workers' lines do not interleave
            out.write(line + "\n")


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    """The built-in catalogs only (no user catalogs, no DLRUN_PATH) with this machine as `localhost`, loaded
    once per module while that environment holds (experiments included)."""
    from dlrun.catalog import load_catalog
    from dlrun.probe.host import probe_host

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg")))
        patch.delenv("DLRUN_PATH", raising=False)
        loaded = load_catalog(host=probe_host())
        loaded.experiments  # noqa: B018  (loaded now, while the environment is fixed)
        yield loaded


@pytest.fixture
def dlrun_home(tmp_path, monkeypatch) -> Path:
    """An empty, private DLRUN_HOME (run directories + result store) and no user catalogs."""
    home = tmp_path / "dlrun-home"
    monkeypatch.setenv("DLRUN_HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.delenv("DLRUN_PATH", raising=False)
    return home


#: For running a rendered RDMA-fabric job on this machine, whose hard locked-memory limit is a few MiB: `ulimit`
#: as an exported bash function that reports `-l` unlimited, as an RDMA node does (dlrun.render.memlock_argv).
UNLIMITED_MEMLOCK_ENV = {"BASH_FUNC_ulimit%%": '() { if [ "$#" -eq 1 ] && [ "$1" = -l ]; then echo unlimited; '
                                              'else builtin ulimit "$@"; fi; }'}


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600,
            check: bool | None = None) -> subprocess.CompletedProcess:
    """Run the real `dlrun` entry point in a subprocess (as a user would)."""
    proc = subprocess.run([sys.executable, "-m", "dlrun.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})
    if check:
        assert proc.returncode == 0, f"dlrun {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def cli_json(*args: str, env: dict[str, str] | None = None):
    proc = run_cli(*args, "--json", env=env, check=True)
    return json.loads(proc.stdout)


@pytest.fixture
def cli():
    return run_cli
