"""The Docker API through docker-py: Docker itself, or Podman's compatible service
(`podman system service --time=0 unix:///run/podman/podman.sock`). Endpoint: `--host`, else
`$DOCKER_HOST`, else the engine's default socket."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dlrun.errors import DlrunError

DOCKER_DEFAULT = "unix:///var/run/docker.sock"
PLATFORM = {"x86_64": "linux/amd64", "ppc64le": "linux/ppc64le", "aarch64": "linux/arm64"}


def podman_default_socket() -> str:
    if os.geteuid() == 0:
        return "unix:///run/podman/podman.sock"
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    return f"unix://{runtime}/podman/podman.sock"


def endpoint(engine: str, host: str | None = None) -> str:
    if host:
        return host
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    return podman_default_socket() if engine == "podman" else DOCKER_DEFAULT


def client(engine: str, host: str | None = None):
    url = endpoint(engine, host)
    try:
        import docker
    except ImportError:
        raise DlrunError("docker-py is not installed; pip install 'dlrun[images]'") from None
    try:
        api = docker.DockerClient(base_url=url, timeout=600)
        api.ping()
    except Exception as exc:  # docker.errors.DockerException, requests errors, FileNotFoundError
        start = ("start Docker (systemctl start docker)" if engine == "docker" else
                 f"start Podman's API service: podman system service --time=0 {url}")
        raise DlrunError(f"cannot reach the Docker API at {url} ({type(exc).__name__}: {exc}); {start}, or give "
                         "--host / DOCKER_HOST (Podman's service works too: --engine podman)") from None
    return api


def image_id(api, reference: str) -> str | None:
    import docker

    try:
        return api.images.get(reference).id
    except docker.errors.ImageNotFound:
        return None


def inspect(api, reference: str) -> dict[str, Any]:
    image = api.images.get(reference)
    return {"digest": image.id, "repo_digests": sorted(image.attrs.get("RepoDigests") or []),
            "layers": list((image.attrs.get("RootFS") or {}).get("Layers") or []),
            "size_bytes": image.attrs.get("Size")}


def build(api, *, context: Path, dockerfile: str, tag: str, arch: str, log) -> str:
    # The host's network: a daemon without a bridge (HPC nodes, CI) has no other that reaches a package mirror.
    stream = api.api.build(path=str(context), dockerfile=dockerfile, tag=tag, platform=PLATFORM[arch], rm=True,
                           decode=True, network_mode="host")
    for chunk in stream:
        if "error" in chunk:
            raise DlrunError(f"docker build failed: {chunk['error'].strip()}")
        text = chunk.get("stream") or chunk.get("status")
        if text:
            log(text.rstrip("\n"))
    found = image_id(api, tag)
    if found is None:
        raise DlrunError(f"docker build finished but {tag} is not in the engine")
    return found


def pull(api, source: str, *, arch: str, tag: str) -> str:
    import docker

    try:
        image = api.images.pull(source, platform=PLATFORM[arch])
    except docker.errors.APIError as exc:
        raise DlrunError(f"pull {source} failed: {exc.explanation or exc}") from None
    image.tag(*split_tag(tag))
    return image.id


def push(api, reference: str, destination: str) -> str | None:
    """Tag `reference` as `destination` and push it; returns the manifest digest the registry reports."""
    import docker

    repo, name = split_tag(destination)
    api.images.get(reference).tag(repo, name)
    digest = None
    try:
        for chunk in api.images.push(repo, tag=name, stream=True, decode=True):
            if "error" in chunk:
                raise DlrunError(f"push {destination} failed: {chunk['error']}")
            aux = chunk.get("aux") or {}
            digest = aux.get("Digest", digest)
    except docker.errors.APIError as exc:
        raise DlrunError(f"push {destination} failed: {exc.explanation or exc}") from None
    return f"{repo}@{digest}" if digest else None


def split_tag(reference: str) -> tuple[str, str]:
    """`registry:5000/repo:tag` -> (`registry:5000/repo`, `tag`); no tag -> `latest`."""
    last = reference.rsplit("/", 1)[-1]
    if ":" in last:
        repo, _, tag = reference.rpartition(":")
        return repo, tag
    return reference, "latest"


def save(api, reference: str, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        with open(tmp, "wb") as out:
            for chunk in api.images.get(reference).save(named=True):
                out.write(chunk)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def load(api, archive: Path, tag: str) -> str:
    with open(archive, "rb") as handle:
        images = api.images.load(handle)
    if len(images) != 1:
        raise DlrunError(f"{archive} held {len(images)} images; dlrun loads archives of one image")
    images[0].tag(*split_tag(tag))
    return images[0].id
