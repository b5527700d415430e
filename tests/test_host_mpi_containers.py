"""The DGX-2 arrangement, run for real: the host's mpirun starts one container per rank, and the ranks
initialise MPI inside their containers through the host launcher's PMIx server.

What Open MPI and PMIx document and what this machine shows (Debian's Open MPI 4.1.4 + PMIx 4.2.2 on the host
and in the image, Podman 4.3; Docker 20.10 behaved the same when measured by hand):

  * a PMIx client finds its server through PMIX_SERVER_URI* (tcp4://127.0.0.1:PORT): reachable from a
    container on the host's network, which dlrun gives every engine container;
  * the server's directory (PMIX_SERVER_TMPDIR, Open MPI's session directory) holds PMIx's shared-memory
    datastore and Open MPI's shared-memory segments: without it at its own path PMIx reports
    `PMIX ERROR ... gds_ds12_lock_pthread.c`;
  * two ranks of one node in separate PID namespaces crash in Open MPI's shared-memory transport (vader,
    SIGSEGV), also with single-copy off: the containers need the host's PID namespace;
  * PMIx refuses a client whose uid is not the launcher's (`OPAL ERROR: Unreachable`, MPI_Init fails and
    mpirun waits): the container runs as the launcher's user.

So a container per rank under the host's mpirun works with --network=host, --pid=host, the PMIx directory at
its own path and --user of the launcher (dlrun.runtimes.docker.HOST_PMIX_FLAGS), and fails without them.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from dlrun.catalog import load_catalog
from dlrun.images.verify import with_local_image
from dlrun.job import RankCommand
from dlrun.plan import resolve_plan
from dlrun.probe.host import probe_host
from dlrun.registry import LAUNCHERS, RUNTIMES, SCHEDULERS
from dlrun.runtimes.docker import HOST_PMIX_FLAGS
from dlrun.shell import export_lines, join

HELLO = r"""
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
  int rank, size, sum = 0, one = 1;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  printf("rank %d of %d: allreduce %d\n", rank, size, sum);
  MPI_Finalize();
  return 0;
}
"""


def _hello(tmp_path):
    if shutil.which("mpicc") is None:
        pytest.fail("mpicc is needed: apt-get install libopenmpi-dev (`make sysdeps` installs it)", pytrace=False)
    (tmp_path / "hello.c").write_text(HELLO)
    subprocess.run(["mpicc", "-o", str(tmp_path / "hello"), str(tmp_path / "hello.c")], check=True, timeout=120)
    return tmp_path / "hello"


def _launch_script(plan, hello, program_edit=None) -> str:
    """The job's own launch of `hello` in its ranks: the podman runtime's wrap under the mpirun launcher."""
    launcher, runtime = LAUNCHERS.get("mpirun"), RUNTIMES.get("podman")
    rank = RankCommand(argv=[str(hello)], env={}, passthrough=launcher.rank_env_names,
                       passthrough_prefixes=launcher.rank_env_prefixes)
    wrapped = runtime.wrap(plan, rank)
    if program_edit:
        wrapped = wrapped.with_argv([program_edit(word) for word in wrapped.argv])
    launch = launcher.wrap(plan, wrapped, SCHEDULERS.get("local"))
    return "\n".join([*export_lines(launch.env), join(launch.argv)]) + "\n"


@pytest.mark.mpi
def test_host_mpirun_starts_one_podman_container_per_rank_that_joins_its_pmix(cpu_reference_in_podman, tmp_path,
                                                                              monkeypatch):
    for key, value in cpu_reference_in_podman["env"].items():  # the plan reads the lock and store from here
        monkeypatch.setenv(key, value)
    hello = _hello(tmp_path)
    plan = resolve_plan(load_catalog(host=probe_host()), "trivial", image="cpu-reference", runtime="podman",
                        launcher="mpirun", scheduler="local", ranks_per_node=2, fabric="tcp",
                        local_image=with_local_image)
    env = {**os.environ, **cpu_reference_in_podman["env"], "DLRUN_RUN_DIR": str(tmp_path)}
    script = _launch_script(plan, hello)
    assert "--pid=host" in script and "PMIX_SERVER_TMPDIR" in script and '--user "$(id -u):$(id -g)"' in script
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert sorted(line for line in proc.stdout.splitlines() if line.startswith("rank ")) == [
        "rank 0 of 2: allreduce 2", "rank 1 of 2: allreduce 2"]

    # without the PMIx flags (as dlrun rendered it before): each container has its own PID namespace, and the
    # two ranks crash in Open MPI's shared memory
    bare = _launch_script(plan, hello, program_edit=lambda word: word.replace(HOST_PMIX_FLAGS, "")
                          if HOST_PMIX_FLAGS in word else word)
    assert "--pid=host" not in bare
    failed = subprocess.run(["bash", "-c", bare], capture_output=True, text=True, env=env, timeout=300)
    assert failed.returncode != 0 and "allreduce 2" not in failed.stdout, failed.stdout + failed.stderr
    said = failed.stdout + failed.stderr
    assert "Segmentation fault" in said or "PMIX ERROR" in said, said[-2000:]


def test_docker_api_ranks_that_load_mpi_are_refused_by_the_launcher_session_rule(monkeypatch):
    """docker_run starts its containers without HOST_PMIX_FLAGS: an MPI program in them cannot join mpirun's
    PMIx server, refused before anything starts."""
    monkeypatch.setenv("DLRUN_HOME", "/nonexistent/dlrun-home")
    from dlrun.render import render_job

    plan = resolve_plan(load_catalog(host=probe_host()), "nccl_all_reduce_perf", system="dgx2",
                        runtime="docker-api")
    refused = [f.rule for f in render_job(plan).refusals]
    assert refused == ["launcher-session"]
    assert not render_job(plan.model_copy(update={"runtime": "docker"})).refusals
