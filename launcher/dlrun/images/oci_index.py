"""One tag for every architecture: an image reference resolved through the registry (the OCI distribution
API, through oras-py, which also finds the site's registry credentials), and the OCI image index a push
adds its architecture to.

A reference (`REGISTRY/REPO:TAG` or `REGISTRY/REPO@sha256:...`) names either one image manifest or an
index (an OCI image index, or Docker's manifest list) of one manifest per platform. `resolve` reads it and
returns, for one architecture: the index digest (when it is one), the architecture's manifest digest, and
the digest of that manifest's image config, which is the image ID an engine reports and the lock's
`digest`. Every document read is checked against the digest that named it, so a registry that hands out
altered bytes is refused before an engine pulls anything; the engines then pull the architecture's
manifest by digest (immutable) and check the content themselves.

`add_to_index` puts an OCI image index at a tag: the platforms it already lists (or the single image the
tag named before) and this architecture's manifest, replacing an older one of the same platform.

A registry on a loopback address is used as Docker treats it: HTTPS without verifying the certificate,
else plain HTTP. Every other registry must present a certificate the system trusts.
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
from dataclasses import dataclass
from typing import Any

from dlrun.errors import DlrunError, UsageError
from dlrun.images.refs import split_registry

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
#: dlrun's architecture -> the OCI platform (architecture, variant)
PLATFORMS = {"x86_64": ("amd64", None), "ppc64le": ("ppc64le", None), "aarch64": ("arm64", "v8")}
#: a manifest or index larger than this is refused unread (real ones are a few KiB)
MAX_DOCUMENT = 4 * 1024 * 1024


class RegistryDigestMismatch(DlrunError):
    exit_code = 1


@dataclass(frozen=True)
class Resolved:
    """One architecture's image in a registry."""

    repository: str    #: REGISTRY/REPO
    manifest: str      #: sha256:... of the architecture's image manifest
    config: str        #: sha256:... of its image config: the image ID engines report
    index: str | None  #: sha256:... of the index it was chosen from; None: the reference named the manifest
    members: tuple[str, ...] = ()  #: the manifest digests the index holds (every platform)

    @property
    def manifest_reference(self) -> str:
        return f"{self.repository}@{self.manifest}"

    @property
    def index_reference(self) -> str | None:
        return f"{self.repository}@{self.index}" if self.index else None


def split_reference(reference: str) -> tuple[str, str, str]:
    """`REGISTRY/REPO[:TAG|@DIGEST]` -> (registry, repository path, tag or digest); the tag defaults to latest."""
    registry, rest = split_registry(reference)
    if registry is None:
        registry, rest = "registry-1.docker.io", rest if "/" in rest else f"library/{rest}"
    if "@" in rest:
        repo, _, ref = rest.partition("@")
    elif ":" in rest.rsplit("/", 1)[-1]:
        repo, _, ref = rest.rpartition(":")
    else:
        repo, ref = rest, "latest"
    return registry, repo, ref


def is_loopback(registry: str) -> bool:
    host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 or "]" in registry else registry
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Registry:
    """The distribution API of one registry, through oras-py (auth, retries, TLS)."""

    def __init__(self, registry: str):
        try:
            import oras.container
            import oras.provider
        except ImportError:
            raise DlrunError("oras-py is not installed; pip install 'dlrun[images]'") from None
        self.registry = registry
        self._oras = oras
        self.client = oras.provider.Registry(hostname=registry, tls_verify=not is_loopback(registry))
        self._auth_loaded: set[str] = set()

    def _request(self, method: str, repo: str, path: str, **kwargs: Any):
        import requests

        if repo not in self._auth_loaded:  # the site's registry credentials (docker config), once per repository
            self.client.auth.load_configs(self._oras.container.Container(f"{self.registry}/{repo}"))
            self._auth_loaded.add(repo)
        url = f"{self.client.prefix}://{self.registry}/v2/{repo}/{path}"
        try:
            return self.client.do_request(url, method, **kwargs)
        except requests.exceptions.SSLError:
            if self.client.prefix == "http" or not is_loopback(self.registry):
                raise
            self.client.prefix = "http"  # a loopback registry without TLS, as Docker falls back to
            return self._request(method, repo, path, **kwargs)
        except (requests.RequestException, ValueError) as exc:
            raise DlrunError(f"cannot reach the registry {self.registry}: {type(exc).__name__}: {exc}") from None

    def document(self, repo: str, ref: str) -> tuple[bytes, str, str]:
        """(bytes, media type, digest) of the manifest or index `ref` names; a digest must match the bytes."""
        accept = ", ".join((*INDEX_TYPES, *MANIFEST_TYPES))
        response = self._request("GET", repo, f"manifests/{ref}", headers={"Accept": accept})
        if response.status_code == 404:
            raise DlrunError(f"{self.registry}/{repo}:{ref} is not in the registry (HTTP 404)")
        if response.status_code != 200:
            raise DlrunError(f"the registry {self.registry} answered HTTP {response.status_code} for "
                             f"{repo}:{ref}: {response.text[:200]!r}")
        data = response.content
        if len(data) > MAX_DOCUMENT:
            raise DlrunError(f"{self.registry}/{repo}:{ref} is {len(data)} bytes, more than a manifest can be")
        digest = sha256(data)
        if ref.startswith("sha256:") and digest != ref:
            raise RegistryDigestMismatch(
                f"digest mismatch: {self.registry}/{repo}@{ref} was asked for, but the registry returned a "
                f"manifest whose digest is {digest}; refusing it (the registry's copy was altered)")
        media_type = response.headers.get("Content-Type", "").split(";")[0] or json.loads(data).get("mediaType")
        return data, media_type, digest

    def config(self, repo: str, digest: str) -> dict[str, Any]:
        response = self._request("GET", repo, f"blobs/{digest}")
        if response.status_code != 200:
            raise DlrunError(f"the registry {self.registry} answered HTTP {response.status_code} for the image "
                             f"config {repo}@{digest}")
        actual = sha256(response.content[:MAX_DOCUMENT + 1])
        if actual != digest:
            raise RegistryDigestMismatch(
                f"digest mismatch: the image config {self.registry}/{repo}@{digest} was asked for, but the "
                f"registry returned one whose digest is {actual}; refusing it (the registry's copy was altered)")
        return json.loads(response.content)

    def put_index(self, repo: str, tag: str, body: bytes) -> str:
        response = self._request("PUT", repo, f"manifests/{tag}", headers={"Content-Type": OCI_INDEX}, data=body)
        if response.status_code not in (200, 201):
            raise DlrunError(f"the registry {self.registry} refused the image index for {repo}:{tag} "
                             f"(HTTP {response.status_code}): {response.text[:300]!r}")
        return sha256(body)


def _platform_matches(entry: dict[str, Any], arch: str) -> bool:
    want, variant = PLATFORMS[arch]
    platform = entry.get("platform") or {}
    return (platform.get("os") == "linux" and platform.get("architecture") == want
            and (variant is None or platform.get("variant") in (None, variant)))


def _pick(index: dict[str, Any], arch: str, where: str) -> dict[str, Any]:
    for entry in index.get("manifests") or []:
        if _platform_matches(entry, arch):
            return entry
    have = sorted({"/".join(filter(None, [(e.get("platform") or {}).get("os"),
                                           (e.get("platform") or {}).get("architecture"),
                                           (e.get("platform") or {}).get("variant")]))
                   for e in index.get("manifests") or []})
    raise DlrunError(f"{where} has no image for {arch} (linux/{PLATFORMS[arch][0]}); it lists "
                     f"{', '.join(have) or 'no platform'}")


def resolve(reference: str, arch: str) -> Resolved:
    """`arch`'s image of `reference` (a manifest, or an index holding one for `arch`)."""
    registry, repo, ref = split_reference(reference)
    client = Registry(registry)
    data, media_type, digest = client.document(repo, ref)
    index, members = None, ()
    if media_type in INDEX_TYPES:
        index, listed = digest, json.loads(data)
        members = tuple(e["digest"] for e in listed.get("manifests") or [])
        entry = _pick(listed, arch, reference)
        data, media_type, digest = client.document(repo, entry["digest"])
    if media_type not in MANIFEST_TYPES:
        raise DlrunError(f"{reference} is a {media_type or 'document of no media type'}, not a container image")
    config_digest = json.loads(data)["config"]["digest"]
    config = client.config(repo, config_digest)
    want = PLATFORMS[arch][0]
    if config.get("architecture") != want:
        raise DlrunError(f"{reference} is an image for {config.get('architecture')}, not {arch} ({want})")
    return Resolved(f"{registry}/{repo}", digest, config_digest, index, members)


def _descriptor(client: Registry, repo: str, digest: str) -> tuple[dict[str, Any], str]:
    """(an index entry for the image manifest `digest`, its platform read from its config; the config's
    digest)."""
    data, media_type, _ = client.document(repo, digest)
    config_digest = json.loads(data)["config"]["digest"]
    config = client.config(repo, config_digest)
    platform = {"architecture": config.get("architecture"), "os": config.get("os") or "linux"}
    if config.get("variant"):
        platform["variant"] = config["variant"]
    return {"mediaType": media_type, "digest": digest, "size": len(data), "platform": platform}, config_digest


def index_entries(client: Registry, repo: str, tag: str) -> list[dict[str, Any]]:
    """What the tag holds now, as index entries (an image it named alone becomes one entry)."""
    try:
        data, media_type, digest = client.document(repo, tag)
    except DlrunError as exc:
        if "HTTP 404" in str(exc):
            return []
        raise
    if media_type in INDEX_TYPES:
        return list(json.loads(data).get("manifests") or [])
    return [_descriptor(client, repo, digest)[0]]


def add_to_index(tag_reference: str, arch: str, manifest_digest: str) -> Resolved:
    """Make `tag_reference` an OCI image index holding `manifest_digest` (this architecture's image, pushed to
    the same repository) beside the other platforms it already holds; returns the index as resolved."""
    registry, repo, tag = split_reference(tag_reference)
    if tag.startswith("sha256:"):
        raise DlrunError(f"{tag_reference} names a digest; an index goes to a tag (REPO:TAG)")
    client = Registry(registry)
    entry, config_digest = _descriptor(client, repo, manifest_digest)
    if entry["platform"]["architecture"] != PLATFORMS[arch][0]:
        raise DlrunError(f"{registry}/{repo}@{manifest_digest} is an image for "
                         f"{entry['platform']['architecture']}, not {arch}")
    keep = [e for e in index_entries(client, repo, tag) if not _platform_matches(e, arch)]
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX,
             "manifests": sorted([*keep, entry], key=lambda e: json.dumps(e.get("platform"), sort_keys=True))}
    body = json.dumps(index, indent=2, sort_keys=True).encode()
    return Resolved(f"{registry}/{repo}", manifest_digest, config_digest, client.put_index(repo, tag, body),
                    tuple(e["digest"] for e in index["manifests"]))


def arch_tag(reference: str, arch: str) -> str:
    """The architecture's own tag beside the index's: `REPO:TAG` -> `REPO:TAG-<arch>`."""
    registry, repo, tag = split_reference(reference)
    if tag.startswith("sha256:"):
        raise UsageError(f"push --to {reference!r} names a digest; valid: REPO:TAG (a registry computes the digest)")
    return f"{reference.rsplit(':', 1)[0] if reference.rsplit('/', 1)[-1].count(':') else reference}:{tag}-{arch}"
