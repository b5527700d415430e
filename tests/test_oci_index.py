"""References and expected digests without a registry: how a reference splits, which registries are used as
Docker uses a loopback one, the architecture's own tag beside an index, and the one-line refusals of a
`--digest` or `--lock-from` that cannot be right (exit 2, nothing pulled or loaded). The registry itself is
exercised for real in tests/test_registry_sites.py and tests/test_registry_engines.py."""
from __future__ import annotations

import pytest
import yaml

from conftest import run_cli
from dlrun.errors import UsageError
from dlrun.images.oci_index import arch_tag, is_loopback, split_reference


@pytest.mark.parametrize("reference,parts", [
    ("127.0.0.1:5000/site-a/cpu-reference:1", ("127.0.0.1:5000", "site-a/cpu-reference", "1")),
    ("127.0.0.1:5000/site-a/cpu-reference", ("127.0.0.1:5000", "site-a/cpu-reference", "latest")),
    ("registry.example.org/dlrun/cpu@sha256:" + "a" * 64,
     ("registry.example.org", "dlrun/cpu", "sha256:" + "a" * 64)),
    ("localhost/dlrun/cpu:x86_64", ("localhost", "dlrun/cpu", "x86_64")),
    ("debian:bookworm", ("registry-1.docker.io", "library/debian", "bookworm")),
    ("arm64v8/debian:bookworm-slim", ("registry-1.docker.io", "arm64v8/debian", "bookworm-slim")),
])
def test_references_split_as_docker_reads_them(reference, parts):
    assert split_reference(reference) == parts


def test_loopback_registries_are_the_ones_used_without_verification():
    assert [is_loopback(r) for r in ("127.0.0.1:5000", "127.0.0.7", "localhost:443", "[::1]:5000", "localhost")] == \
        [True] * 5
    assert [is_loopback(r) for r in ("registry.example.org", "10.0.0.1:5000", "nvcr.io", "[fe80::1]:5000")] == \
        [False] * 4


def test_each_architecture_has_its_own_tag_beside_the_index():
    assert arch_tag("127.0.0.1:5000/site-a/cpu-reference:1", "ppc64le") == \
        "127.0.0.1:5000/site-a/cpu-reference:1-ppc64le"
    assert arch_tag("127.0.0.1:5000/site-a/cpu-reference", "x86_64") == \
        "127.0.0.1:5000/site-a/cpu-reference:latest-x86_64"
    with pytest.raises(UsageError, match="names a digest; valid: REPO:TAG"):
        arch_tag("127.0.0.1:5000/site-a/cpu-reference@sha256:" + "b" * 64, "x86_64")


def _error(proc, code: int = 2) -> str:
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert proc.stdout == "" and proc.stderr.startswith("dlrun: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    return proc.stderr


def test_an_expected_digest_that_cannot_be_right_is_one_line_exit_2(dlrun_home, tmp_path):
    common = ("cpu-reference", "--engine", "docker", "--arch", "x86_64", "--dry-run")
    source = ("--from", "registry.example.org/site-a/cpu-reference:1")
    assert "--digest 'sha256:abc' is not a digest; valid: sha256: and 64 hex digits" in _error(
        run_cli("images", "pull", *common, *source, "--digest", "sha256:abc"))
    assert "--lock-from " in _error(run_cli("images", "load", "x.tar", *common, "--lock-from", str(tmp_path / "no")))
    other = tmp_path / "other.lock"
    other.write_text(yaml.safe_dump({"version": 1, "images": {"tiny": {"x86_64": {"digest": "sha256:" + "c" * 64}}}}))
    assert f"{other} has no entry for image cpu-reference (x86_64)" in _error(
        run_cli("images", "pull", *common, "--lock-from", str(other)))
    assert "pull needs --from REPO:TAG (or --lock-from LOCK" in _error(run_cli("images", "pull", *common))
    digest = "sha256:" + "d" * 64
    other.write_text(yaml.safe_dump({"version": 1, "images": {"cpu-reference": {"x86_64": {
        "digest": digest, "repo_digests": [f"registry.example.org/site-a/cpu-reference@sha256:{'e' * 64}"]}}}}))
    assert f"--digest sha256:{'f' * 64} differs from the digest {digest} that {other} records" in _error(
        run_cli("images", "pull", *common, "--lock-from", str(other), "--digest", "sha256:" + "f" * 64))
    # --lock-from alone: the registry reference by digest the other site recorded
    proc = run_cli("images", "pull", *common, "--lock-from", str(other))
    assert proc.returncode == 0 and f"registry.example.org/site-a/cpu-reference@sha256:{'e' * 64}" in proc.stdout
