"""The Docker engine for real: a private dockerd (fixtures_docker), cpu-reference loaded into it by
`dlrun images load --engine docker`, and `dlrun run --runtime docker` running the harness in it, 1 and 2
ranks under mpirun, with the dataset bound read-only. The ranks run as the job's user; a signal to dlrun,
and a `docker run` killed with SIGKILL, leave no container behind; an image whose ID differs from the lock
is refused before anything runs; `images load` and `images save` keep the image ID."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from fixtures_images import dlrun
from fixtures_registry import tiny_site_spec

pytestmark = pytest.mark.containers


def stored_run(env: dict[str, str]) -> dict:
    runs = json.loads(dlrun("results", "list", "--json", env=env).stdout)
    assert runs, "no run was stored"
    return json.loads(dlrun("results", "show", runs[0]["id"], "--json", env=env).stdout)


@pytest.fixture(scope="module")
def tfrecords(tmp_path_factory) -> Path:
    """Real data for the harness: TFRecord shards the image's Pillow decodes."""
    dataset = tmp_path_factory.mktemp("docker-data") / "imagenet-mini"
    made = dlrun("data", "synth", "--format", "tfrecord", "--images", "32", "--classes", "4", "--size", "32",
                 str(dataset))
    assert made.returncode == 0, made.stderr
    return dataset


def labelled(daemon, run_dir: str | None = None) -> list[str]:
    """IDs of the containers (running or not) that carry dlrun's run label (of `run_dir`, when given)."""
    label = "dlrun.run-dir" + (f"={run_dir}" if run_dir else "")
    return daemon.cli("ps", "-aq", "--filter", f"label={label}").stdout.split()


@pytest.mark.mpi
@pytest.mark.parametrize("runtime,ranks", [("docker", 1), ("docker", 2), ("docker-api", 1)])
def test_harness_runs_in_dockerd(cpu_reference_in_docker, tfrecords, tmp_path, runtime, ranks):
    """The docker CLI, and docker-py (the docker-api runtime) against the same daemon."""
    env = {**cpu_reference_in_docker["env"], "DLRUN_HOME": str(tmp_path / "home")}
    started = time.time()
    proc = dlrun("run", "trivial", "--image", "cpu-reference", "--runtime", runtime, "--data", str(tfrecords),
                 "--ranks-per-node", str(ranks), "--threads", "1", "--steps", "6", "--warmup-steps", "2",
                 "--batch-size", "4", env=env, timeout=900)
    seconds = time.time() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = stored_run(env)
    digest = cpu_reference_in_docker["entry"]["digest"]
    assert (run["status"], run["runtime"], run["image"]) == ("ok", runtime, "cpu-reference")
    assert run["image_digest"] == digest
    assert run["provenance"]["image_check"] == {**run["provenance"]["image_check"], "verified": True,
                                                "field": "digest", "digest": digest}
    where = "docker" if runtime == "docker" else f"the Docker API at {cpu_reference_in_docker['daemon'].url}"
    assert run["provenance"]["image_check"]["artifact"] == \
        f"localhost/dlrun/cpu-reference:{cpu_reference_in_docker['arch']} in {where}"
    result = run["results"][0]
    assert result["extra"]["world_size"] == ranks and result["value"] > 0
    assert (result["extra"]["data_source"], result["extra"]["data_path"]) == ("tfrecord", "/data")
    assert result["extra"]["framework_version"] == "1.13.0a0"  # Debian's torch in the image, not the host's
    script = (Path(run["run_dir"]) / "run.sh").read_text()
    assert ("docker run" if runtime == "docker" else "dlrun.images.docker_run") in script
    assert f"{tfrecords}:/data:ro" in script
    assert labelled(cpu_reference_in_docker["daemon"], run["run_dir"]) == []  # --rm: nothing left
    print(f"\n{runtime} runtime, {ranks} rank(s): {seconds:.0f} s for the whole run "
          f"({cpu_reference_in_docker['daemon'].storage_driver} storage), trivial {result['value']:.1f} images/sec; "
          f"load took {cpu_reference_in_docker['load_seconds']} s")


def test_ranks_run_as_the_jobs_user_with_the_dataset_read_only(cpu_reference_in_docker, tmp_path, monkeypatch):
    """The runtime's own wrapped command, started by an unprivileged user: what the rank writes into the run
    directory is that user's, and the dataset cannot be written."""
    from dlrun.catalog import load_catalog
    from dlrun.images.verify import with_local_image
    from dlrun.job import RankCommand
    from dlrun.plan import resolve_plan
    from dlrun.probe.host import probe_host
    from dlrun.registry import RUNTIMES
    from dlrun.shell import join

    daemon = cpu_reference_in_docker["daemon"]
    data, run_dir = tmp_path / "dataset", tmp_path / "run"
    data.mkdir()
    run_dir.mkdir(mode=0o777)
    os.chmod(run_dir, 0o777)
    os.chmod(tmp_path, 0o755)
    (data / "README").write_text("read-only dataset\n")
    for key, value in cpu_reference_in_docker["env"].items():
        monkeypatch.setenv(key, value)
    plan = resolve_plan(load_catalog(host=probe_host()), "trivial", image="cpu-reference", runtime="docker",
                        data=str(data), local_image=with_local_image)
    probe = RankCommand(argv=["sh", "-c", "id -u; cat /data/README; touch out && stat -c %u out; "
                                          "if touch /data/x 2>/dev/null; then echo WRITABLE; else echo READ-ONLY; fi"])
    argv = RUNTIMES.get("docker").wrap(plan, probe).argv
    # The unprivileged user reaches this private daemon (at a site: the docker group) and the run directory.
    opened = {path: path.stat().st_mode for path in (*_up_to_tmp(daemon.work), *_up_to_tmp(tmp_path))}
    for path, mode in opened.items():
        os.chmod(path, mode | 0o001)
    os.chmod(daemon.sock, 0o666)
    (tmp_path / "client").mkdir(mode=0o777)
    os.chmod(tmp_path / "client", 0o777)
    try:
        proc = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "bash", "-c",
                               join(argv)], capture_output=True, text=True, timeout=300,
                              env={**os.environ, **daemon.env, "DLRUN_RUN_DIR": str(run_dir),
                                   "DOCKER_CONFIG": str(tmp_path / "client")})
    finally:
        os.chmod(daemon.sock, 0o660)
        for path, mode in opened.items():
            os.chmod(path, mode)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["65534", "read-only dataset", "65534", "READ-ONLY"]
    assert (run_dir / "out").stat().st_uid == 65534 and not (data / "x").exists()


def _up_to_tmp(path: Path) -> list[Path]:
    """`path` and the folders above it up to the first that every user may already enter (/tmp, say)."""
    closed = []
    for folder in (path.resolve(), *path.resolve().parents):
        if folder.stat().st_mode & 0o001:
            break
        closed.append(folder)
    return closed


def _wait_for_container(daemon, deadline_s: float = 300) -> list[str]:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        running = daemon.cli("ps", "-q", "--filter", "label=dlrun.run-dir").stdout.split()
        if running:
            return running
        time.sleep(0.5)
    pytest.fail("no container of the run started")


def _is_client(argv: list[bytes]) -> bool:
    return argv[:2] == [b"docker", b"run"] or b"dlrun.images.docker_run" in argv


def _docker_clients(home: str) -> list[int]:
    """The `docker run` (or docker-api's helper) processes of the job started with DLRUN_HOME `home`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and _is_client((entry / "cmdline").read_bytes().split(b"\0")) \
                    and f"DLRUN_HOME={home}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # it ended meanwhile
            continue
    return found


@pytest.mark.parametrize("runtime,how", [("docker", "dlrun-sigterm"), ("docker", "client-sigkill"),
                                         ("docker-api", "client-sigkill")])
def test_no_container_outlives_its_run(cpu_reference_in_docker, tmp_path, runtime, how):
    """SIGTERM to dlrun ends the job: `docker run` forwards it to the container's init, which ends the rank.
    A `docker run` (or docker-api's helper) killed with SIGKILL forwards nothing: the executor removes the
    container it left."""
    daemon = cpu_reference_in_docker["daemon"]
    env = {**cpu_reference_in_docker["env"], "DLRUN_HOME": str(tmp_path / "home")}
    argv = [*_dlrun_argv(), "run", "trivial", "--image", "cpu-reference", "--runtime", runtime,
            "--steps", "100000000", "--batch-size", "2", "--threads", "1"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})
    try:
        _wait_for_container(daemon)
        if how == "dlrun-sigterm":
            proc.send_signal(signal.SIGTERM)
        else:
            clients = _docker_clients(env["DLRUN_HOME"])
            assert clients, "no docker run client found"
            for client in clients:
                os.kill(client, signal.SIGKILL)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out + err
    run = stored_run(env)
    assert run["status"] == ("cancelled" if how == "dlrun-sigterm" else "failed"), run["status"]
    assert labelled(daemon, run["run_dir"]) == [], f"{how}: a container outlived its run"


def _dlrun_argv() -> list[str]:
    import sys

    return [sys.executable, "-m", "dlrun.cli"]


def test_run_refuses_an_image_whose_id_differs_from_the_lock(cpu_reference_in_docker, tmp_path):
    lock = yaml.safe_load(Path(cpu_reference_in_docker["env"]["DLRUN_IMAGES_LOCK"]).read_text())
    arch = cpu_reference_in_docker["arch"]
    other = "sha256:" + "d" * 64
    lock["images"]["cpu-reference"][arch]["digest"] = other
    (tmp_path / "images.lock").write_text(yaml.safe_dump(lock))
    env = {**cpu_reference_in_docker["env"], "DLRUN_HOME": str(tmp_path / "home"),
           "DLRUN_IMAGES_LOCK": str(tmp_path / "images.lock")}
    proc = dlrun("run", "trivial", "--image", "cpu-reference", "--runtime", "docker", "--steps", "2", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"images.lock records {other}, but localhost/dlrun/cpu-reference:{arch} in docker has " \
           f"{cpu_reference_in_docker['entry']['digest']}" in proc.stderr
    assert not list((tmp_path / "home").glob("runs/*")), "nothing may run"


def test_load_and_save_keep_the_image_id(dockerd, tiny_images, tmp_path):
    """`images load` and `images save` through docker-py: the archive saved is the image loaded, by its ID (the
    tiny image: the same code as for cpu-reference, without writing 1.4 GB again)."""
    from dlrun.images.archive import read_docker_archive

    tiny_site_spec(tmp_path / "catalog")
    env = {**dockerd.env, "DLRUN_PATH": str(tmp_path / "catalog"), "DLRUN_IMAGES_LOCK": str(tmp_path / "images.lock"),
           "DLRUN_HOME": str(tmp_path / "home")}
    archive, image_id = tiny_images["x86_64"]
    loaded = dlrun("images", "load", str(archive), "--engine", "docker", env=env)  # name and arch from its labels
    assert loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout[loaded.stdout.index("{"):])["digest"] == image_id
    saved = tmp_path / "saved.tar"
    proc = dlrun("images", "save", "tiny", "--arch", "x86_64", "--engine", "docker", "-o", str(saved), env=env)
    assert proc.returncode == 0, proc.stderr
    assert read_docker_archive(saved).image_id == image_id
