"""cpu-reference under the real Apptainer (Debian sid's, entered through tests/apptainer/): its SIF built by
`dlrun images build --engine apptainer` from the Docker archive of the debootstrap build, the harness run in it
by `dlrun run --runtime apptainer` (1 rank, and 2 under mpirun) and `--runtime singularity`, with `--data`
bound read-only; Apptainer is handed exactly the rendered `exec` line; a SIF whose digest differs from the
lock is refused before anything runs; and the SIF goes through a loopback registry as an OCI artifact
(`oras://`) and is verified by its digest at the other end."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from fixtures_images import dlrun

pytestmark = pytest.mark.containers


def test_the_test_set_up_scripts_pass_shellcheck_and_say_what_is_missing(tmp_path):
    from fixtures_apptainer import SHIMS
    from golden_files import shellcheck_path

    scripts = [SHIMS / "apptainer", SHIMS / "prepare-root.sh"]
    assert subprocess.run([shellcheck_path(), "--severity=style", *map(str, scripts)]).returncode == 0
    assert (SHIMS / "singularity").resolve() == (SHIMS / "apptainer").resolve()
    for name in ("apptainer", "singularity"):
        proc = subprocess.run([str(SHIMS / name), "--version"], capture_output=True, text=True,
                              env={**os.environ, "DLRUN_TEST_APPTAINER_ROOT": str(tmp_path / "none")})
        assert proc.returncode == 127 and proc.stdout == ""
        assert proc.stderr.startswith(f"{name} (dlrun test set-up): no Apptainer root at '{tmp_path / 'none'}'; ")


def stored_run(env: dict[str, str]) -> dict:
    runs = json.loads(dlrun("results", "list", "--json", env=env).stdout)
    assert runs, "no run was stored"
    return json.loads(dlrun("results", "show", runs[0]["id"], "--json", env=env).stdout)


@pytest.fixture
def site(cpu_reference_sif, tmp_path) -> dict[str, str]:
    """A run home of its own, and a log of what Apptainer was handed."""
    return {**cpu_reference_sif["env"], "DLRUN_HOME": str(tmp_path / "home"),
            "DLRUN_TEST_APPTAINER_LOG": str(tmp_path / "apptainer-calls.log")}


def test_the_sif_is_built_from_the_archive_and_locked(cpu_reference_sif, apptainer):
    entry, sif = cpu_reference_sif["entry"], cpu_reference_sif["sif"]
    from dlrun.images.digest import file_sha256

    from dlrun.images.archive import read_docker_archive

    assert entry["sif"] == file_sha256(sif)
    # the very image the other engines run: the lock keeps its image ID beside the SIF's own digest
    image_id = read_docker_archive(cpu_reference_sif["archive"]).image_id
    assert entry["digest"] == image_id and entry["sif_from"] == f"docker-archive {image_id}"
    assert entry["recorded_by"] == "build (debootstrap)"
    env = cpu_reference_sif["env"]
    for engine in ("apptainer", "singularity"):
        proc = dlrun("images", "verify", "cpu-reference", "--engine", engine, env=env)
        assert proc.returncode == 0 and f"SIF file {entry['sif']}: matches images.lock" in proc.stdout + proc.stderr
    # `singularity` finds the same SIF up to date: built from the same image ID, unchanged since
    proc = dlrun("images", "build", "cpu-reference", "--engine", "singularity", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "build from the Docker archive" in proc.stderr and f"{sif}: up to date" in proc.stderr
    assert json.loads(proc.stdout)["sif"] == entry["sif"]
    inside = subprocess.run(["singularity", "exec", str(sif), "cat", "/etc/dlrun/image.json"], capture_output=True,
                            text=True, env={**os.environ, **env}, timeout=300)
    assert inside.returncode == 0, inside.stderr
    assert json.loads(inside.stdout)["packages"] == entry["packages"]
    print(f"\napptainer: {apptainer['version']}; root {'made' if apptainer['cold'] else 'cached'} in "
          f"{apptainer['prepare_seconds']} s ({apptainer['ready'].splitlines()[1:]}); SIF "
          f"{sif.stat().st_size / 1e6:.0f} MB in {cpu_reference_sif['sif_seconds']} s")


def rendered_apptainer_words(run_dir: Path, name: str) -> list[str]:
    """The words of the job script's `exec` line from the runtime's command on (after mpirun's)."""
    line = next(line for line in (run_dir / "run.sh").read_text().splitlines() if line.startswith("exec "))
    words = shlex.split(line)
    return words[words.index(name):]


def matches_rendered(rendered: list[str], called: list[str]) -> bool:
    """Word for word, with the script's `${...}` expansions matching what they expanded to."""
    patterns = [re.escape(word).replace(r"\$", "$") for word in rendered]
    patterns = [re.sub(r"\$\\\{[^}]*\\\}", ".+", pattern) for pattern in patterns]
    return len(rendered) == len(called) and all(re.fullmatch(p, w) for p, w in zip(patterns, called))


@pytest.mark.parametrize("runtime,ranks", [
    ("apptainer", 1), pytest.param("apptainer", 2, marks=pytest.mark.mpi), ("singularity", 1)])
def test_harness_runs_in_the_sif(cpu_reference_sif, site, runtime, ranks, tmp_path):
    dataset = tmp_path / "imagenet-mini"
    made = dlrun("data", "synth", "--format", "tfrecord", "--images", "64", "--classes", "4", "--size", "64",
                 str(dataset), env=site)
    assert made.returncode == 0, made.stderr
    args = ["--launcher", "mpirun", "-r", "2"] if ranks == 2 else []
    proc = dlrun("run", "trivial", "--image", "cpu-reference", "--runtime", runtime, "--data", str(dataset), *args,
                 "--steps", "10", "--warmup-steps", "2", "--batch-size", "4", env=site, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = stored_run(site)
    entry = cpu_reference_sif["entry"]
    assert run["status"] == "ok" and run["runtime"] == runtime and run["world_size"] == ranks
    assert run["image_digest"] == entry["digest"]  # the same image ID as a Charliecloud or Podman run of it
    check = run["provenance"]["image_check"]
    assert check == {**check, "verified": True, "field": "sif", "digest": entry["sif"],
                     "artifact": str(cpu_reference_sif["sif"])}
    assert run["plan"]["data"]["mount"] == "/data"
    results = run["results"][0]
    assert results["value"] > 0 and results["extra"]["framework_version"] == "1.13.0a0"
    assert (results["extra"]["data_source"], results["extra"]["data_path"]) == ("tfrecord", "/data")
    # Apptainer was handed exactly the script's line, once per rank (dlrun's probes only asked for its version)
    calls = [shlex.split(line) for line in Path(site["DLRUN_TEST_APPTAINER_LOG"]).read_text().splitlines()]
    assert {tuple(call) for call in calls if call[1:2] != ["exec"]} <= {("apptainer", "--version"),
                                                                       ("singularity", "--version")}
    calls = [call for call in calls if call[1:2] == ["exec"]]
    rendered = rendered_apptainer_words(Path(run["run_dir"]), runtime)
    assert rendered[:2] == [runtime, "exec"] and f"{dataset}:/data:ro" in rendered
    assert len(calls) == ranks and all(matches_rendered(rendered, call) for call in calls), (rendered, calls)
    print(f"\n{runtime}, {ranks} rank(s): trivial {results['value']:.1f} images/sec")


def test_dataset_is_read_only_and_gpu_flags_are_taken(cpu_reference_sif, tmp_path, monkeypatch):
    """The runtime's own command, with a probe as the rank command: the dataset is bound read-only, and the
    flags a GPU node's job gets (`--nv`, a fabric device bound at its path) are what Apptainer takes (on this
    node without GPUs it warns that it found no NVIDIA libraries, and runs)."""
    from dlrun.catalog import load_catalog
    from dlrun.images.verify import with_local_image
    from dlrun.job import RankCommand
    from dlrun.plan import Plan, resolve_plan
    from dlrun.probe.host import probe_host
    from dlrun.registry import RUNTIMES
    from dlrun.shell import join

    dataset = tmp_path / "dataset"
    dataset.mkdir()
    (dataset / "README").write_text("read-only dataset\n")
    for key, value in cpu_reference_sif["env"].items():
        monkeypatch.setenv(key, value)
    plan = resolve_plan(load_catalog(host=probe_host()), "trivial", image="cpu-reference", runtime="apptainer",
                        data=str(dataset), local_image=with_local_image)
    probe = RankCommand(argv=["sh", "-c", "cat /data/README; if touch /data/x 2>/dev/null; then echo WRITABLE; "
                                          "else echo READ-ONLY; fi; test -c /dev/null && echo DEVICE"], env={})
    gpu = Plan(**{**dict(plan), "device": "cuda", "devices": ["/dev/null"]})
    env = {**os.environ, "DLRUN_RUN_DIR": str(tmp_path)}
    for each in (plan, gpu):
        argv = RUNTIMES.get("apptainer").wrap(each, probe).argv
        assert ("--nv" in argv) is (each is gpu) and ("/dev/null:/dev/null" in argv) is (each is gpu)
        proc = subprocess.run(["bash", "-c", join(argv)], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines() == ["read-only dataset", "READ-ONLY", "DEVICE"], (proc.stdout, proc.stderr)
    assert not (dataset / "x").exists()


def test_run_refuses_a_sif_whose_digest_differs(cpu_reference_sif, site, tmp_path):
    lock = yaml.safe_load(Path(site["DLRUN_IMAGES_LOCK"]).read_text())
    other = "sha256:" + "f" * 64
    lock["images"]["cpu-reference"][cpu_reference_sif["arch"]]["sif"] = other
    (tmp_path / "images.lock").write_text(yaml.safe_dump(lock))
    env = {**site, "DLRUN_IMAGES_LOCK": str(tmp_path / "images.lock")}
    proc = dlrun("run", "trivial", "--image", "cpu-reference", "--runtime", "apptainer", "--steps", "2", env=env)
    assert proc.returncode == 1
    assert f"images.lock records {other}, but {cpu_reference_sif['sif']} has {cpu_reference_sif['entry']['sif']}" \
        in proc.stderr
    assert not list(Path(site["DLRUN_HOME"]).glob("runs/*")), "nothing may run"
    log = Path(site["DLRUN_TEST_APPTAINER_LOG"])
    assert " exec " not in (log.read_text() if log.exists() else ""), "no container is started"


def manifest_digest(address: str, repository: str, tag: str) -> str:
    request = urllib.request.Request(f"http://{address}/v2/{repository}/manifests/{tag}", method="HEAD",
                                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.headers["Docker-Content-Digest"]


def test_sif_shared_through_a_registry_by_digest(cpu_reference_sif, apptainer_registry, site, tmp_path):
    """Site A pushes its SIF as an OCI artifact; site B, holding A's lock entry, pulls it by manifest digest
    and verifies it; a different SIF under the same tag is refused at pull, and B's copy stays."""
    address, arch, entry = apptainer_registry["address"], cpu_reference_sif["arch"], cpu_reference_sif["entry"]
    tag = f"oras://{address}/site-a/cpu-reference:{arch}"
    proc = dlrun("images", "push", "cpu-reference", "--engine", "apptainer", "--to", tag, env=site)
    assert proc.returncode == 0, proc.stderr
    manifest = manifest_digest(address, "site-a/cpu-reference", arch)
    site_b = {**site, "DLRUN_IMAGES_DIR": str(tmp_path / "site-b" / "images"),
              "DLRUN_IMAGES_LOCK": str(tmp_path / "site-b" / "images.lock"), "DLRUN_HOME": str(tmp_path / "site-b")}
    Path(site_b["DLRUN_IMAGES_LOCK"]).parent.mkdir(parents=True)
    shutil.copy(site["DLRUN_IMAGES_LOCK"], site_b["DLRUN_IMAGES_LOCK"])  # A's lock entry, handed on with the image
    proc = dlrun("images", "pull", "cpu-reference", "--engine", "apptainer", "--from",
                 f"oras://{address}/site-a/cpu-reference@{manifest}", env=site_b)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["sif"] == entry["sif"]
    pulled = Path(site_b["DLRUN_IMAGES_DIR"]) / "cpu-reference" / arch / "cpu-reference.sif"
    proc = dlrun("images", "verify", "cpu-reference", "--engine", "apptainer", env=site_b)
    assert proc.returncode == 0, proc.stderr  # what a run checks first (the runs above run this very file)
    # Another SIF pushed under the tag: refused (both digests), nothing left in B's store but its own copy.
    other = tmp_path / "other.sif"
    (tmp_path / "tree" / "etc").mkdir(parents=True)
    (tmp_path / "tree" / "etc" / "os-release").write_text("not cpu-reference\n")
    env = {**os.environ, **site}
    for argv in (["apptainer", "build", str(other), str(tmp_path / "tree")],
                 ["apptainer", "push", "--no-https", str(other), tag]):
        made = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
        assert made.returncode == 0, made.stderr
    proc = dlrun("images", "pull", "cpu-reference", "--engine", "apptainer", "--from", tag, env=site_b)
    assert proc.returncode == 1
    from dlrun.images.digest import file_sha256

    assert f"images.lock records {entry['sif']}, but the SIF pulled from {tag} has {file_sha256(other)}" in proc.stderr
    assert sorted(p.name for p in pulled.parent.iterdir()) == ["cpu-reference.sif"]
    assert file_sha256(pulled) == entry["sif"]
