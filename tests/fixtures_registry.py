"""Session fixtures for a real image registry between sites: Debian's `docker-registry` (the CNCF distribution
registry) on a free loopback port, serving TLS with a certificate made for the session (ch-image speaks only
HTTPS; Docker, Podman, skopeo and dlrun treat a loopback registry as one whose certificate is not verified,
as Docker does), and a cheap image for every architecture (a tiny root filesystem whose image config names
the architecture), for the image-index tests before a real foreign build exists.

The registry stops when the session ends; its storage is the session's temporary folder.
"""
from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from loopback import free_port

REGISTRY_TOOLS = {"docker-registry": "docker-registry", "skopeo": "skopeo", "openssl": "openssl"}
CONFIG = """\
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
  tls:
    certificate: {cert}
    key: {key}
"""
#: The image config's `architecture` of each dlrun architecture (the OCI platform names).
OCI_ARCH = {"x86_64": "amd64", "ppc64le": "ppc64le", "aarch64": "arm64"}


def require_registry_tools() -> None:
    missing = [f"{tool} (apt-get install {package})" for tool, package in REGISTRY_TOOLS.items()
               if shutil.which(tool) is None]
    if missing:
        pytest.fail("the registry tests need: " + "; ".join(missing) + " (`make sysdeps` installs them)",
                    pytrace=False)


def _certificate(work: Path) -> tuple[Path, Path]:
    cert, key = work / "registry.crt", work / "registry.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out",
                    str(cert)], check=True, capture_output=True)
    return cert, key


def _answers(port: int) -> bool:
    import warnings

    import requests
    from urllib3.exceptions import InsecureRequestWarning

    try:
        with warnings.catch_warnings():  # the session's own certificate: nothing to verify it against
            warnings.simplefilter("ignore", InsecureRequestWarning)
            return requests.get(f"https://127.0.0.1:{port}/v2/", verify=False, timeout=2).status_code == 200
    except requests.RequestException:
        return False


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    """{"address": "127.0.0.1:PORT", "root": its storage, "log": its log file}."""
    require_registry_tools()
    work = tmp_path_factory.mktemp("registry")
    cert, key = _certificate(work)
    for _attempt in range(5):  # another process may take the free port between the probe and the bind
        port = free_port()
        config = work / "config.yml"
        config.write_text(CONFIG.format(root=work / "storage", port=port, cert=cert, key=key))
        log = open(work / "registry.log", "w")
        proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 30
        while proc.poll() is None and not _answers(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        if proc.poll() is None and _answers(port):
            break
        proc.kill()
        proc.wait()
        log.close()
    else:
        pytest.fail(f"docker-registry did not start: {(work / 'registry.log').read_text()[-2000:]}", pytrace=False)
    try:
        yield {"address": f"127.0.0.1:{port}", "root": work / "storage", "log": work / "registry.log"}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def tiny_layer(arch: str) -> bytes:
    """One layer: a file that says which architecture's image it is, and the folders a runtime binds."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as layer:
        for folder in ("etc", "data", "tmp"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            layer.addfile(info)
        text = f"dlrun tiny image for {arch}\n".encode()
        info = tarfile.TarInfo("etc/dlrun-tiny")
        info.size, info.mode, info.mtime = len(text), 0o644, 0
        layer.addfile(info, io.BytesIO(text))
    return out.getvalue()


@pytest.fixture(scope="session")
def tiny_images(tmp_path_factory):
    """A Docker archive of the tiny image per architecture: {arch: (path, image ID)}, written by dlrun's own
    archive writer, labelled `dlrun.image: tiny` and its architecture."""
    from dlrun.images.archive import Layer, write_docker_archive
    from dlrun.images.digest import bytes_sha256

    work = tmp_path_factory.mktemp("tiny-images")
    made = {}
    for arch, oci in OCI_ARCH.items():
        data = tiny_layer(arch)
        config = {"architecture": oci, "os": "linux", "created": "2026-01-01T00:00:00Z",
                  "config": {"Labels": {"dlrun.image": "tiny", "dlrun.arch": arch}, "Cmd": ["/bin/true"]},
                  "rootfs": {"type": "layers", "diff_ids": [bytes_sha256(data)]},
                  "history": [{"created": "2026-01-01T00:00:00Z", "created_by": "dlrun tests: one file"}]}
        path = work / f"tiny_{arch}.tar"
        image_id = write_docker_archive(path, config, [Layer(bytes_sha256(data), None, data)],
                                        [f"localhost/dlrun-test/tiny:{arch}"], mtime=0)
        made[arch] = (path, image_id)
    return made


#: The tiny image as a site's own catalog entry (every architecture, so that each loads and pushes).
TINY_SPEC = """\
name: tiny
description: "a root filesystem of one file per architecture, for the registry and image-index tests"
uri: localhost/dlrun-test/tiny
"""


def tiny_site_spec(site: Path) -> None:
    """`tiny` as a site's own image (in `site`/containers), cpu-reference's pins with another name."""
    import yaml

    from conftest import REPO

    spec = yaml.safe_load((REPO / "containers" / "cpu-reference" / "image.yaml").read_text())
    spec.pop("debootstrap", None)
    spec.update(name="tiny", uri="localhost/dlrun-test/tiny", description=yaml.safe_load(TINY_SPEC)["description"])
    folder = site / "containers" / "tiny"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "image.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
