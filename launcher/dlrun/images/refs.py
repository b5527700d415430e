"""Where `dlrun images pull --from` and `push --to` point, split into what each engine's tool accepts.

A location is `SCHEME://REST` or a bare registry reference (`[REGISTRY/]REPO[:TAG|@DIGEST]`, no scheme).
The tools disagree on the form of a registry reference: Docker's API and `ch-image` take it bare,
Singularity/Apptainer want `docker://` in front, enroot wants `docker://REGISTRY#REPO:TAG` (`#` between
registry and repository; its doc/cmd/import.md). Engines render from the parsed form; a scheme the engine's
tool cannot take is a usage error naming the ones it can.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from dlrun.errors import UsageError, closest

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")
REGISTRY = ""  #: the "scheme" of a bare registry reference
#: every scheme some engine takes: one of these is a choice, not a typo, so no closest match is offered
KNOWN_SCHEMES = frozenset({"docker", "dockerd", "podman", "oras", "library", "shub", "http", "https"})
DESCRIBE = {REGISTRY: "REPO:TAG (a registry reference)"}


@dataclass(frozen=True)
class Location:
    given: str   #: as the user typed it
    scheme: str  #: lower case, without `://`; REGISTRY ("") for a bare reference
    rest: str    #: after `scheme://`

    @property
    def registry_reference(self) -> str:
        """`[REGISTRY/]REPO[:TAG]` of a `docker://` or bare location; enroot's `REGISTRY#REPO` is read too."""
        return self.rest.replace("#", "/", 1)


def parse_location(text: str) -> Location:
    if not text or text != text.strip():
        raise UsageError(f"image location {text!r} is empty or has surrounding spaces; valid: REPO:TAG, "
                         "docker://REPO:TAG, ...")
    match = _SCHEME.match(text)
    if match is None:
        return Location(text, REGISTRY, text)
    scheme, rest = match.group(1).lower(), match.group(2)
    if not rest:
        raise UsageError(f"image location {text!r} names no image after {scheme}://")
    return Location(text, scheme, rest)


def describe(scheme: str) -> str:
    return DESCRIBE.get(scheme, f"{scheme}://...")


def check_scheme(location: Location, accepted: tuple[str, ...], engine: str, operation: str) -> None:
    """Refuse a location whose scheme `engine` cannot `operation` (one line: what it can, the closest match)."""
    if location.scheme in accepted:
        return
    valid = ", ".join(describe(s) for s in accepted)
    hint = None if location.scheme in KNOWN_SCHEMES else closest(location.scheme, [s for s in accepted if s])
    did_you_mean = f"; did you mean {hint}://?" if hint else ""
    what = "a bare registry reference" if location.scheme == REGISTRY else f"scheme {location.scheme}://"
    raise UsageError(f"engine {engine} cannot {operation} {location.given!r} ({what}){did_you_mean}; "
                     f"valid for {engine}: {valid}")


def split_registry(reference: str) -> tuple[str | None, str]:
    """(`registry`, `repo:tag`) of a registry reference; the registry is None for Docker Hub.

    Docker's rule: the first component names a registry when it has a `.` or a `:` or is `localhost`."""
    first, _, rest = reference.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return None, reference


def enroot_docker_uri(location: Location) -> str:
    """enroot's `docker://[USER@][REGISTRY#]REPO[:TAG]`: a form already written with `#` is kept as given."""
    if "#" in location.rest:
        return f"docker://{location.rest}"
    registry, repository = split_registry(location.rest)
    return f"docker://{registry}#{repository}" if registry else f"docker://{repository}"
