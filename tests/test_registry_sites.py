"""Two sites share cpu-reference through a real registry (Debian's docker-registry on loopback), by digest:
site A (its own DLRUN_HOME, config, image lock and Docker daemon) pushes the image it built; site B (all of
its own, another daemon: another machine) pulls it by the digest site A's lock names, verifies it, runs the
harness in it and exports a signed bundle; site A imports it and compares: the same image digest, two
sites, kept apart unless asked. A digest other than the one asked for, and a registry copy altered behind
the registry's back, are refused at pull; a tampered archive at load; a copy that differs from the lock at
run. One tag holds every architecture (an OCI image index); each site pulls its own."""
from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from bundle_data import allowed_signers, make_key
from fixtures_images import dlrun
from fixtures_registry import OCI_ARCH, tiny_site_spec

pytestmark = pytest.mark.containers

SYSTEM = """name: {name}
description: "{site}'s CPU node (this machine, as the site describes it)"
arch: {arch}
nodes: 1
cpu: {{sockets: 1, cores_per_socket: 2}}
memory_gb: 4
fabrics: [tcp]
scheduler: local
launcher: mpirun
runtime: docker
default_image: cpu-reference
sources:
  - {{doc: "the site's own description", where: "-"}}
"""


def make_site(root: Path, site: str, system: str, arch: str, daemon, lock: Path | None = None) -> dict[str, str]:
    """A site of its own: home, configuration (its name, its system profile), image store, lock, daemon."""
    systems = root / "config" / "dlrun" / "systems"
    systems.mkdir(parents=True)
    (systems / f"{system}.yaml").write_text(SYSTEM.format(name=system, site=site, arch=arch))
    env = {"DLRUN_HOME": str(root / "home"), "XDG_CONFIG_HOME": str(root / "config"), "DLRUN_SITE": site,
           "DLRUN_IMAGES_DIR": str(root / "store"), "DLRUN_CACHE_DIR": str(root / "cache"),
           "DLRUN_IMAGES_LOCK": str(lock or root / "images.lock"), "DLRUN_PATH": str(root / "catalog"),
           **daemon.env}
    tiny_site_spec(root / "catalog")
    return env


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def entry_of(proc: subprocess.CompletedProcess) -> dict:
    return json.loads(proc.stdout[proc.stdout.index("{"):])


def refused(proc: subprocess.CompletedProcess, *digests: str) -> str:
    """Exit 1, one line naming every digest given."""
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("dlrun: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    for digest in digests:
        assert digest in proc.stderr, (digest, proc.stderr)
    return proc.stderr


@pytest.fixture(scope="module")
def sites(cpu_reference_in_docker, docker_daemons, registry, tmp_path_factory):
    """Site A has pushed cpu-reference to the registry; site B has nothing yet."""
    root = tmp_path_factory.mktemp("sites")
    arch = cpu_reference_in_docker["arch"]
    (root / "a").mkdir()
    lock_a = root / "a" / "images.lock"
    shutil.copy(cpu_reference_in_docker["env"]["DLRUN_IMAGES_LOCK"], lock_a)  # what site A built, its own copy
    a = make_site(root / "a", "site-a", "alpha-cpu", arch, cpu_reference_in_docker["daemon"], lock_a)
    a["DLRUN_IMAGES_DIR"] = cpu_reference_in_docker["env"]["DLRUN_IMAGES_DIR"]
    b = make_site(root / "b", "site-b", "beta-cpu", arch, docker_daemons("site-b"))
    tag = f"{registry['address']}/site-a/cpu-reference:1"
    started = time.time()
    pushed = entry_of(ok(dlrun("images", "push", "cpu-reference", "--engine", "docker", "--to", tag, env=a)))
    return {"a": a, "b": b, "root": root, "arch": arch, "tag": tag, "pushed": pushed, "lock_a": lock_a,
            "digest": cpu_reference_in_docker["entry"]["digest"], "registry": registry,
            "push_seconds": round(time.time() - started, 1)}


@pytest.mark.mpi
def test_two_sites_share_cpu_reference_by_digest(sites, tmp_path):
    a, b, arch, digest = sites["a"], sites["b"], sites["arch"], sites["digest"]
    pushed = sites["pushed"]
    [manifest] = pushed["repo_digests"]
    [index] = pushed["index_digests"]
    repository = sites["tag"].rsplit(":", 1)[0]
    assert manifest.startswith(f"{repository}@sha256:") and index.startswith(f"{repository}@sha256:")
    raw = json.loads(subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--raw", f"docker://{sites['tag']}"],
                                    capture_output=True, text=True, check=True).stdout)
    assert raw["mediaType"] == "application/vnd.oci.image.index.v1+json"
    assert [(m["digest"], m["platform"]["architecture"]) for m in raw["manifests"]] == \
        [(manifest.split("@")[1], OCI_ARCH[arch])]

    # Site B pulls exactly what site A's lock names: the manifest by digest, the image ID insisted on
    started = time.time()
    got = entry_of(ok(dlrun("images", "pull", "cpu-reference", "--engine", "docker", "--lock-from",
                            str(sites["lock_a"]), env=b, timeout=1800)))
    pull_seconds = time.time() - started
    assert got["digest"] == digest and got["repo_digests"] == [manifest]
    assert got["recorded_by"] == f"pull (docker) {manifest}"
    ok(dlrun("images", "verify", "cpu-reference", "--engine", "docker", env=b))
    # ... and through the tag of the index, which gives this machine's architecture
    again = entry_of(ok(dlrun("images", "pull", "cpu-reference", "--engine", "docker", "--from", sites["tag"],
                              "--digest", digest, env=b)))
    assert (again["digest"], again["repo_digests"], again["index_digests"]) == (digest, [manifest], [index])

    # Site B runs the harness in it and sends its run to site A, signed
    ok(dlrun("run", "trivial", "--system", "beta-cpu", "--steps", "4", "--warmup-steps", "1", "--batch-size", "4",
             "--threads", "1", env=b, timeout=900))
    ok(dlrun("run", "trivial", "--system", "alpha-cpu", "--steps", "4", "--warmup-steps", "1", "--batch-size", "4",
             "--threads", "1", env=a, timeout=900))
    keys = tmp_path / "keys"
    bob = make_key(keys, "bob")
    bundle = tmp_path / "site-b.bundle"
    ok(dlrun("results", "export", "--out", str(bundle), "--sign", str(bob), env=b))
    signers = allowed_signers(keys / "allowed_signers", {"ops@site-b.example.org": bob})
    assert ok(dlrun("results", "import", str(bundle), "--allowed-signers", str(signers), env=a)).stdout == \
        "imported 1 of 1 runs from site site-b (signed by ops@site-b.example.org, verified)\n"
    runs = {run["site"]: run for run in json.loads(ok(dlrun("results", "list", "--json", env=a)).stdout)}
    assert sorted(runs) == ["site-a", "site-b"]
    shown = {site: json.loads(ok(dlrun("results", "show", run["id"], "--json", env=a)).stdout)
             for site, run in runs.items()}
    assert {site: run["image_digest"] for site, run in shown.items()} == {"site-a": digest, "site-b": digest}
    assert {site: run["system"] for site, run in shown.items()} == {"site-a": "alpha-cpu", "site-b": "beta-cpu"}
    assert all(run["provenance"]["image_check"]["verified"] for run in shown.values())

    # Kept apart unless asked: the summary holds one row per site; --by site compares them
    summary = json.loads(ok(dlrun("compare", "--workload", "trivial", "--json", env=a)).stdout)
    assert sorted(len(row["runs"]) for row in summary["rows"]) == [1, 1], summary
    [row] = json.loads(ok(dlrun("compare", "--by", "site", "--workload", "trivial", "--baseline", "site-a", "--json",
                                env=a)).stdout)["rows"]
    assert (row["site"], row["baseline"]) == ("site-b", "site-a")
    print(f"\nregistry: push {sites['push_seconds']} s, pull at site B {pull_seconds:.0f} s")


def test_a_different_or_altered_digest_is_refused_at_pull(sites, tmp_path):
    b, digest = sites["b"], sites["digest"]
    other = "sha256:" + "0" * 64
    lock_b = Path(b["DLRUN_IMAGES_LOCK"])
    before = lock_b.read_text() if lock_b.exists() else None
    refused(dlrun("images", "pull", "cpu-reference", "--engine", "docker", "--from", sites["tag"], "--digest", other,
                  env=b), other, digest)
    # another site's lock naming another image: refused the same way
    alien = tmp_path / "alien.lock"
    alien.write_text(Path(sites["lock_a"]).read_text().replace(digest, other))
    refused(dlrun("images", "pull", "cpu-reference", "--engine", "docker", "--lock-from", str(alien), env=b),
            other, digest)
    assert (lock_b.read_text() if lock_b.exists() else None) == before, "a refused pull records nothing"

    # the registry's copy of the manifest altered behind its back (its storage edited): refused before a layer
    [manifest] = sites["pushed"]["repo_digests"]
    hexdigest = manifest.split(":")[-1]
    blob = sites["registry"]["root"] / "docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data"
    original = blob.read_bytes()
    try:
        blob.write_bytes(original.replace(b'"schemaVersion": 2', b'"schemaVersion":  2'))
        message = refused(dlrun("images", "pull", "cpu-reference", "--engine", "docker", "--from", manifest,
                                "--digest", digest, env=b), manifest.split("@")[1])
        assert "the registry's copy was altered" in message
    finally:
        blob.write_bytes(original)


def test_a_different_or_tampered_archive_is_refused_at_load(sites, cpu_reference, tmp_path):
    env = {**sites["b"], "DLRUN_IMAGES_LOCK": str(tmp_path / "images.lock")}
    digest, other = sites["digest"], "sha256:" + "1" * 64
    refused(dlrun("images", "load", str(cpu_reference["archive"]), "--engine", "docker", "--digest", other, env=env),
            other, digest)
    # the archive's image config altered (one byte more): its image ID is no longer the one site A locked. The
    # refusal comes before a layer is read, so the copy carries the manifest and the altered config only.
    tampered = tmp_path / "tampered.tar"
    with tarfile.open(cpu_reference["archive"]) as source, tarfile.open(tampered, "w") as out:
        manifest = source.getmember("manifest.json")
        config = source.getmember(json.load(source.extractfile(manifest))[0]["Config"])
        out.addfile(manifest, source.extractfile(manifest))
        data = source.extractfile(config).read() + b" "
        config.size = len(data)
        out.addfile(config, io.BytesIO(data))
    message = refused(dlrun("images", "load", str(tampered), "cpu-reference", "--engine", "docker", "--lock-from",
                            str(sites["lock_a"]), env=env), digest)
    assert "asked for, but" in message
    assert not Path(env["DLRUN_IMAGES_LOCK"]).exists(), "a refused load records nothing"


def test_a_copy_that_differs_from_the_lock_is_refused_at_run(sites, tmp_path):
    """Site B's lock names another image than its daemon holds under the tag: nothing runs."""
    b, digest = sites["b"], sites["digest"]
    other = "sha256:" + "2" * 64
    lock = tmp_path / "images.lock"
    source = Path(b["DLRUN_IMAGES_LOCK"])
    if not source.exists():
        pytest.fail("site B has pulled nothing yet: run the module's tests in order", pytrace=False)
    lock.write_text(source.read_text().replace(digest, other))
    env = {**b, "DLRUN_IMAGES_LOCK": str(lock), "DLRUN_HOME": str(tmp_path / "home")}
    refused(dlrun("run", "trivial", "--system", "beta-cpu", "--steps", "2", env=env), other, digest)
    assert not list((tmp_path / "home").glob("runs/*"))


# ------------------------------------------------------------------------------------------------ one tag, every arch
#: The images pushed under one tag, each {arch: its Docker archive}: the tiny image of every architecture (cheap:
#: every pull is made); cpu-reference, x86_64 and the emulated ppc64le build, is the last test of the module.
MULTIARCH_CASES = ["tiny"]


@pytest.fixture
def multiarch(request, tiny_images):
    if request.param == "tiny":
        return {"name": "tiny", "archives": {arch: tiny_images[arch][0] for arch in ("x86_64", "ppc64le")},
                "ids": {arch: tiny_images[arch][1] for arch in ("x86_64", "ppc64le")}}
    raise AssertionError(f"no multi-architecture case {request.param}")


@pytest.mark.parametrize("multiarch", MULTIARCH_CASES, indirect=True)
def test_one_tag_for_every_architecture(sites, multiarch, tmp_path):
    """Site A pushes each architecture's build under one tag: an OCI image index of both. Site B pulls its
    own architecture from it (and another's on request); both locks record the index and the manifest."""
    a, b, name = sites["a"], {**sites["b"], "DLRUN_IMAGES_LOCK": str(tmp_path / "b.lock")}, multiarch["name"]
    a = {**a, "DLRUN_IMAGES_LOCK": str(tmp_path / "a.lock")}
    tag = f"{sites['registry']['address']}/site-a/{name}:1"
    for arch, archive in multiarch["archives"].items():
        ok(dlrun("images", "load", str(archive), name, "--arch", arch, "--engine", "docker", env=a))
        ok(dlrun("images", "push", name, "--arch", arch, "--engine", "docker", "--to", tag, env=a))
    raw = json.loads(subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--raw", f"docker://{tag}"],
                                    capture_output=True, text=True, check=True).stdout)
    platforms = {m["platform"]["architecture"]: m["digest"] for m in raw["manifests"]}
    assert sorted(platforms) == sorted(OCI_ARCH[arch] for arch in multiarch["archives"])
    lock_a = yaml.safe_load(Path(a["DLRUN_IMAGES_LOCK"]).read_text())
    repository = tag.rsplit(":", 1)[0]
    for arch in multiarch["archives"]:
        entry = lock_a["images"][name][arch]
        assert entry["repo_digests"] == [f"{repository}@{platforms[OCI_ARCH[arch]]}"], arch
        assert len(entry["index_digests"]) == 1, arch
    [index_ref] = lock_a["images"][name]["x86_64"]["index_digests"]
    assert lock_a["images"][name]["ppc64le"]["index_digests"] == [index_ref]  # the newest index, on both
    assert index_ref == f"{repository}@sha256:" + hashlib.sha256(subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", "--raw", f"docker://{tag}"], capture_output=True,
        check=True).stdout).hexdigest()
    for arch in multiarch["archives"]:
        got = entry_of(ok(dlrun("images", "pull", name, "--arch", arch, "--engine", "docker", "--from", tag,
                                "--digest", multiarch["ids"][arch], env=b)))
        assert got["digest"] == multiarch["ids"][arch]
        assert got["repo_digests"] == [f"{repository}@{platforms[OCI_ARCH[arch]]}"]
        assert got["index_digests"] == [index_ref]
    proc = dlrun("images", "pull", name, "--arch", "aarch64", "--engine", "docker", "--from", tag, env=b)
    assert proc.returncode == 1 and "has no image for aarch64 (linux/arm64); it lists linux/amd64, linux/ppc64le" \
        in proc.stderr, proc.stderr


def test_cpu_reference_of_both_architectures_under_one_tag(sites, cpu_reference_ppc64le, tmp_path):
    """Site A adds its emulated ppc64le build of cpu-reference to the tag its x86_64 build went to: the tag is
    now an OCI image index of both, the same image in the sense a registry means it (Ren et al.'s DGX-2 and
    AC922 run one tag). Site B pulls its own architecture through the tag, by the digest site A's lock names;
    the index and the manifest are in both locks, and ppc64le is listed with its own digest."""
    a, b, tag = sites["a"], {**sites["b"], "DLRUN_IMAGES_LOCK": str(tmp_path / "b.lock")}, sites["tag"]
    ppc = cpu_reference_ppc64le["entry"]["digest"]
    ok(dlrun("images", "load", str(cpu_reference_ppc64le["archive"]), "cpu-reference", "--arch", "ppc64le",
             "--engine", "docker", env=a))
    started = time.time()
    pushed = entry_of(ok(dlrun("images", "push", "cpu-reference", "--arch", "ppc64le", "--engine", "docker",
                               "--to", tag, env=a, timeout=1800)))
    push_seconds = time.time() - started
    raw_bytes = subprocess.run(["skopeo", "inspect", "--tls-verify=false", "--raw", f"docker://{tag}"],
                               capture_output=True, check=True).stdout
    platforms = {m["platform"]["architecture"]: m["digest"] for m in json.loads(raw_bytes)["manifests"]}
    assert sorted(platforms) == ["amd64", "ppc64le"]
    repository = tag.rsplit(":", 1)[0]
    index_ref = f"{repository}@sha256:" + hashlib.sha256(raw_bytes).hexdigest()
    assert pushed["repo_digests"] == [f"{repository}@{platforms['ppc64le']}"] and pushed["index_digests"] == [index_ref]
    lock_a = yaml.safe_load(Path(a["DLRUN_IMAGES_LOCK"]).read_text())["images"]["cpu-reference"]
    assert lock_a["ppc64le"]["digest"] == ppc and lock_a["ppc64le"]["built_emulated_on"] == "x86_64"
    got = entry_of(ok(dlrun("images", "pull", "cpu-reference", "--engine", "docker", "--from", tag, "--digest",
                            sites["digest"], env=b, timeout=1800)))
    assert (got["digest"], got["repo_digests"], got["index_digests"]) == \
        (sites["digest"], [f"{repository}@{platforms['amd64']}"], [index_ref])
    proc = dlrun("images", "pull", "cpu-reference", "--arch", "ppc64le", "--engine", "docker", "--from", tag,
                 "--digest", sites["digest"], env=b)  # the x86_64 image's ID is not the ppc64le image's
    assert proc.returncode == 1 and sites["digest"] in proc.stderr and ppc in proc.stderr, proc.stderr
    print(f"\nregistry: ppc64le cpu-reference pushed in {push_seconds:.0f} s beside x86_64 under one tag")
