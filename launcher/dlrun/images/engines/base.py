"""What every image engine is: a class registered by name in `dlrun.registry.ENGINES`, one module per
family of tools (the Docker API for docker/docker-api/podman; singularity/apptainer; charliecloud and its
debootstrap variant; enroot).

Every operation first describes itself as steps (`Command`, `ApiCall`, `Note`): `--dry-run` prints them,
otherwise the engine runs exactly those. After build, pull or load, the engine's digest of the image goes
to the site's image lock; pull, load, save, push and verify refuse a copy whose digest differs from the
lock (exit 1, both digests), and pull and load one whose digest is not the one asked for (`--digest`, or
another site's lock entry: `Target.expect`).

A pull from a registry is resolved first (dlrun.images.oci_index): the architecture's manifest in an
index, and its image config, whose digest is the image ID; a different ID is refused before a layer is
downloaded, and the engine pulls that manifest by digest. A push of an image goes to the architecture's
own tag (`REPO:TAG-<arch>`) and then into the OCI image index at `REPO:TAG`, which keeps the other
architectures already pushed there: one tag for every architecture.

An operation the engine's tool cannot do, or a `--from`/`--to` it cannot take, is a usage error naming
what would do.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from dlrun.errors import DlrunError, UsageError
from dlrun.images import lock
from dlrun.images.refs import Location, check_scheme, parse_location
from dlrun.images.spec import SpecFile, host_arch
from dlrun.images.steps import Command, Note, run_command
from dlrun.registry import ENGINES, Tool

if TYPE_CHECKING:
    from dlrun.images.oci_index import Resolved

Log = Callable[[str], None]
OPERATIONS = ("build", "pull", "push", "save", "load")


@dataclass(frozen=True)
class Target:
    """One image for one architecture, as an operation works on it."""

    spec_file: SpecFile
    arch: str
    host: str | None = None  #: the Docker API endpoint given with --host (API engines)
    expect: str | None = None  #: the digest the copy must have (`--digest`): its `expect_field`

    @property
    def name(self) -> str:
        return self.spec_file.spec.name

    @property
    def reference(self) -> str:
        """The local tag, `<uri>:<arch>`."""
        return self.spec_file.spec.reference(self.arch)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.arch})"


@dataclass
class Result:
    steps: list[Any]                     #: Command | ApiCall | Note, in order
    entry: dict[str, Any] | None = None  #: the lock entry after the operation
    messages: list[str] = field(default_factory=list)


class DigestMismatch(DlrunError):
    exit_code = 1


def mismatch(name: str, arch: str, what: str, expected: str, actual: str, where: str) -> DigestMismatch:
    return DigestMismatch(
        f"digest mismatch for image {name} ({arch}), {what}: images.lock records {expected}, but {where} has {actual}; "
        f"refusing it. Rebuild or re-pull the image, or record the new digest on purpose: "
        f"dlrun images lock {name} --engine ...")


class Engine:
    #: the lock field holding this engine's digest of an image
    lock_field: ClassVar[str]
    #: what that digest identifies, in messages
    what: ClassVar[str]
    #: the `--from` forms the engine's tool takes: URI schemes, refs.REGISTRY for a bare `REPO:TAG`
    pull_schemes: ClassVar[tuple[str, ...]] = ()
    #: the `--to` forms it can push to
    push_schemes: ClassVar[tuple[str, ...]] = ()
    #: `dlrun images save` writes `<image>_<arch><save_suffix>` unless told otherwise
    save_suffix: ClassVar[str] = ".tar"
    #: the lock field `--digest` names: the image ID, or the file's sha256 for an engine whose copy is a file
    expect_field: ClassVar[str] = "digest"
    #: its push writes an image manifest to the registry, which goes into the tag's OCI image index
    pushes_image: ClassVar[bool] = False

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The programs (or services) this engine needs, and how to install them."""
        return ()

    # ------------------------------------------------------------------------------------ what it can do
    @classmethod
    def supports(cls, operation: str) -> bool:
        return getattr(cls, operation) is not getattr(Engine, operation)

    def cannot(self, operation: str) -> UsageError:
        able = [name for name in ENGINES.names() if ENGINES.get_class(name).supports(operation)]
        return UsageError(f"engine {self.name} cannot {operation} images; valid: --engine {', '.join(able)}")

    def target(self, spec_file: SpecFile, arch: str, host: str | None = None, expect: str | None = None) -> Target:
        """The image as this engine works on it; an engine that cannot take the spec refuses here."""
        return Target(spec_file, arch, host, expect)

    def pull_from(self, source: str) -> str:
        """`--from` as this engine's tool writes it; a form it cannot take is a usage error."""
        location = parse_location(source)
        check_scheme(location, self.pull_schemes, self.name, "pull from")
        return self.render_pull(location)

    def push_to(self, destination: str) -> str:
        location = parse_location(destination)
        check_scheme(location, self.push_schemes, self.name, "push to")
        return self.render_push(location)

    def render_pull(self, location: Location) -> str:
        raise self.cannot("pull")

    def render_push(self, location: Location) -> str:
        raise self.cannot("push")

    # ------------------------------------------------------------------------------------ operations
    def build(self, t: Target, *, dry_run: bool = False, log: Log = print) -> Result:
        raise self.cannot("build")

    def pull(self, t: Target, source: str, *, dry_run: bool = False, log: Log = print) -> Result:
        raise self.cannot("pull")

    def push(self, t: Target, destination: str, *, dry_run: bool = False) -> Result:
        raise self.cannot("push")

    def save(self, t: Target, output: Path, *, dry_run: bool = False) -> Result:
        raise self.cannot("save")

    def load(self, t: Target, archive: Path, *, dry_run: bool = False, log: Log = print) -> Result:
        raise self.cannot("load")

    def current_digest(self, t: Target) -> tuple[str, str]:
        """(the `lock_field` digest of the copy this machine has, where that copy is); raise when none."""
        raise NotImplementedError

    def lock_extra(self, t: Target) -> dict[str, Any]:
        """Lock fields besides `lock_field` that the copy at hand tells (e.g. the image ID of its archive)."""
        return {}

    def verify(self, t: Target, *, dry_run: bool = False) -> Result:
        steps = [Note(f"compare the {self.what} of {t.label} with images.lock")]
        if dry_run:
            return Result(steps)
        recorded = lock.entry(t.name, t.arch) or {}
        actual, where = self.current_digest(t)
        expected = recorded.get(self.lock_field)
        if not expected:
            raise DlrunError(f"images.lock ({lock.lock_path()}) has no {self.lock_field} digest for {t.label}; "
                             f"build, pull or load it, or record what is here: dlrun images lock {t.name} "
                             f"--engine {self.name}")
        if expected != actual:
            raise mismatch(t.name, t.arch, self.what, expected, actual, where)
        return Result(steps, recorded, [f"{t.label} {self.what} {actual}: matches images.lock"])

    def lock(self, t: Target, *, dry_run: bool = False) -> Result:
        """Record the digest of the copy at hand (e.g. built from the committed recipe without dlrun)."""
        steps = [Note(f"record the {self.what} of {t.label} in {lock.lock_path()}")]
        if dry_run:
            return Result(steps)
        actual, _ = self.current_digest(t)
        fields = {**self.lock_extra(t), self.lock_field: actual}
        entry = self.record(t, f"lock ({self.name})", **fields)
        return Result(steps, entry, [f"recorded {self.lock_field} {actual} for {t.label}"])

    # ------------------------------------------------------------------------------------ shared steps
    def record(self, t: Target, recorded_by: str, *, replace: bool = False, **fields: Any) -> dict[str, Any]:
        fields.setdefault("spec_sha256", t.spec_file.sha256)
        return lock.record(t.name, t.arch, replace=replace, recorded_by=recorded_by, **fields)

    def check_against_lock(self, t: Target, actual: str, where: str, field_name: str | None = None,
                           what: str | None = None) -> bool:
        """True when the lock has this digest already; raise when it has another; False when it has none."""
        field_name = field_name or self.lock_field
        if t.expect and field_name == self.expect_field and t.expect != actual:
            raise DigestMismatch(f"digest mismatch for image {t.name} ({t.arch}), {what or self.what}: {t.expect} was "
                                 f"asked for, but {where} has {actual}; refusing it")
        expected = (lock.entry(t.name, t.arch) or {}).get(field_name)
        if expected and expected != actual:
            raise mismatch(t.name, t.arch, what or self.what, expected, actual, where)
        return bool(expected)

    # ------------------------------------------------------------------------------------ registries
    def registry_image(self, t: Target, reference: str) -> "Resolved":
        """`reference` resolved to this architecture's image; refused (nothing pulled) when its image ID is not
        the one asked for or the one the lock records."""
        from dlrun.images.oci_index import resolve

        resolved = resolve(reference, t.arch)
        self.check_against_lock(t, resolved.config, f"{reference} (its {t.arch} image in the registry)", "digest",
                                "image ID")
        return resolved

    def record_registry(self, t: Target, resolved: "Resolved", **fields: Any) -> dict[str, Any]:
        """Record `resolved` (its manifest reference, and its index's) with `fields` for this architecture."""
        known = lock.entry(t.name, t.arch) or {}
        if "recorded_by" in fields:
            fields.setdefault("spec_sha256", t.spec_file.sha256)
        fields["repo_digests"] = _merged(known.get("repo_digests"), resolved.manifest_reference)
        if resolved.index_reference:
            fields["index_digests"] = _merged(known.get("index_digests"), resolved.index_reference)
        entry = lock.record(t.name, t.arch, **fields)
        if resolved.index_reference:
            self._share_index(t, resolved)
        return entry

    @staticmethod
    def _share_index(t: Target, resolved: "Resolved") -> None:
        """Every other architecture whose manifest the new index holds gets its digest, in place of an older
        index of the same repository (each push of an architecture makes a new index)."""
        for arch, other in (lock.read_lock().get(t.name) or {}).items():
            held = [r for r in other.get("repo_digests") or []
                    if r.split("@")[0] == resolved.repository and r.split("@")[1] in resolved.members]
            if arch != t.arch and held:
                lock.record(t.name, arch, index_digests=_merged(other.get("index_digests"), resolved.index_reference))

    def push_steps(self, t: Target, destination: str) -> tuple[str, str, Note | None]:
        """(the tag to push to, the tag the index goes to, the step that writes the index)."""
        from dlrun.images.oci_index import arch_tag

        reference = self.push_to(destination)
        if not self.pushes_image:
            return reference, reference, None
        pushed = arch_tag(reference, t.arch)
        return pushed, reference, Note(f"add {pushed} ({t.arch}) to the OCI image index {reference} (oras-py)")

    def publish(self, t: Target, pushed: str, index_tag: str, same_id: bool = True) -> tuple[dict[str, Any], str]:
        """Put the image just pushed to `pushed` into the index at `index_tag`; record both; (lock entry, text).
        `same_id`: the registry's image ID must be the lock's (the engine pushed the locked image as it is)."""
        from dlrun.images.oci_index import add_to_index, resolve

        resolved = resolve(pushed, t.arch)
        if same_id:
            self.check_against_lock(t, resolved.config, f"{pushed} (pushed)", "digest", "image ID")
        indexed = add_to_index(index_tag, t.arch, resolved.manifest)
        entry = self.record_registry(t, indexed)
        return entry, f"pushed {resolved.manifest_reference}; {index_tag} is the index {indexed.index_reference}"

    def run(self, steps: list[Any]) -> None:
        """Run the `Command`s among `steps` in order (a Note or ApiCall is done by the engine's own code)."""
        for step in steps:
            if isinstance(step, Command):
                run_command(step)

    def ensure_native(self, t: Target, tool: str) -> None:
        if t.arch != host_arch():
            raise UsageError(f"{tool} builds for this machine's architecture ({host_arch()}); image {t.name!r} "
                             f"{t.arch} must be built on a {t.arch} node")

    def default_output(self, t: Target) -> Path:
        return Path(f"{t.name}_{t.arch}{self.save_suffix}")


def _merged(known: list[str] | None, new: str) -> list[str]:
    """`known` references with `new`, one per repository (a newer digest replaces an older one there)."""
    repository = new.split("@")[0]
    return sorted({r for r in known or [] if r.split("@")[0] != repository} | {new})
