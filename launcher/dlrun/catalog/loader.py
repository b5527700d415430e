"""Load catalog YAML with line-aware validation errors (`path:line: field: message`).

Search path, later entries overriding earlier ones by name:
  1. built-ins shipped with the package (`recipes/`, `containers/`; see `dlrun.paths.builtin_root`),
  2. `~/.config/dlrun` (or `$XDG_CONFIG_HOME/dlrun`),
  3. each directory of `$DLRUN_PATH` (colon-separated).
Each directory may hold `systems/*.yaml`, `workloads/*.yaml`, `experiments/*.yaml` and `images/*.yaml` or
`containers/*/image.yaml`. Experiments load on first use (a run needs none of them).

Loading is pure data: nothing here looks at the host. The `localhost` system and the `host` image are made
from probed facts that the caller passes in (`load_catalog(host=probe_host())`).
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from dlrun.catalog.experiment_checks import experiment_problems
from dlrun.catalog.experiments import ExperimentSpec
from dlrun.catalog.localhost import host_image, host_tf_image, localhost_system
from dlrun.catalog.models import ImageSpec, SystemSpec, WorkloadSpec
from dlrun.catalog.stack import PinnedImageSpec
from dlrun.errors import DlrunError, unknown_name
from dlrun.paths import builtin_root, config_home
from dlrun.probe.host import HostFacts
from dlrun.yamlfile import BoundedLoader, YamlError, read_yaml

T = TypeVar("T", bound=BaseModel)


class CatalogError(DlrunError):
    """A catalog file is invalid; the message is `path:line: field: message`."""

    exit_code = 2


def builtin_dirs() -> list[Path]:
    root = builtin_root()
    return [root / "recipes", root]


def search_dirs() -> list[Path]:
    dirs = builtin_dirs()
    dirs.append(config_home())
    for entry in os.environ.get("DLRUN_PATH", "").split(os.pathsep):
        if entry:
            dirs.append(Path(entry))
    return dirs


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """Follow a pydantic error location through the YAML node tree; return the 1-based line."""
    line = node.start_mark.line + 1 if node is not None else None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == key), None)
            if match is None:
                match = next((k for k, v in node.value if k.value == key), None)
            node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            break
        if node is None:
            break
        line = node.start_mark.line + 1
    return line


class CatalogLoader(BoundedLoader):
    """dlrun's bounded YAML loader (`dlrun.yamlfile`: aliases counted and their expansion measured before
    anything is built), reading `61.10e6` as the number it is, as YAML 1.2 and every editor's YAML language
    server do (YAML 1.1 wants a dot and a signed exponent: `6.110e+7`)."""


CatalogLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))
_LOADER = CatalogLoader


def _entries(path: Path) -> Iterator[tuple[Any, yaml.Node]]:
    """Yield (data, node) per entry: a file holds one mapping or a list of mappings."""
    # One parse: compose the node tree (kept for error line numbers), measure it, then build the data from it.
    # LibYAML's parser when PyYAML has it: the pure-Python one made catalog loading most of a dry run's 0.4 s.
    try:
        data, node = read_yaml(path, "catalog file", _LOADER)
    except YamlError as exc:
        raise CatalogError(str(exc)) from None
    if isinstance(data, list):
        yield from zip(data, node.value)
    elif data is not None:
        yield data, node


def parse_entry(model: type[T], data: Any, node: yaml.Node | None, path: Path) -> T:
    if not isinstance(data, dict):
        line = node.start_mark.line + 1 if node is not None else 1
        raise CatalogError(f"{path}:{line}: expected a mapping, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        # Union members appear in the location by class name (`mpi.MpiSpec.version`); users wrote `mpi.version`.
        loc = tuple(part for part in err["loc"] if not _union_member(part))
        line = _line_of(node, loc) or 1
        field_name = ".".join(str(part) for part in loc) or "(entry)"
        raise CatalogError(f"{path}:{line}: {field_name}: {err['msg']}") from None


def _union_member(part: Any) -> bool:
    """pydantic names union members by class, or `function-after[validator(), Class]` when validated."""
    return isinstance(part, str) and (part in _model_names() or re.fullmatch(r"function-\w+\[.*\]", part) is not None)


def _model_names() -> set[str]:
    def walk(cls: type) -> set[str]:
        names = {cls.__name__}
        for sub in cls.__subclasses__():
            names |= walk(sub)
        return names

    return walk(BaseModel) - {"BaseModel"}


def load_file(model: type[T], path: Path) -> list[T]:
    return [parse_entry(model, data, node, path) for data, node in _entries(path)]


def _collect(model: type[T], files: list[Path]) -> dict[str, T]:
    found: dict[str, T] = {}
    for path in files:
        for entry in load_file(model, path):
            found[entry.name] = entry  # later search dirs override earlier ones
    return found


def _files(kind: str) -> list[Path]:
    files: list[Path] = []
    for base in search_dirs():
        if kind == "images":
            files += sorted((base / "images").glob("*.yaml"))
            files += sorted((base / "containers").glob("*/image.yaml"))
        else:
            files += sorted((base / kind).glob("*.yaml"))
    return list(dict.fromkeys(files))


@dataclass
class Catalog:
    images: dict[str, ImageSpec] = field(default_factory=dict)
    workloads: dict[str, WorkloadSpec] = field(default_factory=dict)
    systems: dict[str, SystemSpec] = field(default_factory=dict)
    _experiments: dict[str, ExperimentSpec] | None = field(default=None, repr=False, compare=False)

    @property
    def experiments(self) -> dict[str, ExperimentSpec]:
        if self._experiments is None:
            self._experiments = load_experiments(self, _files("experiments"))
        return self._experiments

    def experiment(self, name: str) -> ExperimentSpec:
        if name not in self.experiments:
            raise unknown_name("experiment", name, self.experiments)
        return self.experiments[name]

    def image(self, name: str) -> ImageSpec:
        if name not in self.images:
            raise unknown_name("image", name, self.images)
        return self.images[name]

    def workload(self, name: str) -> WorkloadSpec:
        if name not in self.workloads:
            raise unknown_name("workload", name, self.workloads)
        return self.workloads[name]

    def system(self, name: str) -> SystemSpec:
        if name not in self.systems:
            raise unknown_name("system", name, self.systems)
        return self.systems[name]

    def system_for_host(self, hostname: str) -> str | None:
        """The system whose `hostnames` patterns match this host name (as ReFrame picks its system), if one
        does; two that match are a catalog error, named."""
        found = sorted(name for name, spec in self.systems.items()
                       if any(re.fullmatch(pattern, hostname) for pattern in spec.hostnames))
        if len(found) > 1:
            raise CatalogError(f"host {hostname!r} matches the hostnames of systems {', '.join(found)}; valid: "
                               "patterns that match one system each")
        return found[0] if found else None


def _collect_images(files: list[Path]) -> dict[str, ImageSpec]:
    """`images/*.yaml`: plain entries (a site's own image by uri and digest); `containers/<tag>/image.yaml`:
    fully pinned stacks, one folder per tag."""
    found: dict[str, ImageSpec] = {}
    for path in files:
        pinned = path.name == "image.yaml" and path.parent.parent.name == "containers"
        for entry in load_file(PinnedImageSpec if pinned else ImageSpec, path):
            if pinned and entry.name != path.parent.name:
                raise CatalogError(f"{path}:1: name: {entry.name!r} must match its folder {path.parent.name!r} "
                                   "(one folder per image tag)")
            found[entry.name] = entry
    return found


def load_experiments(catalog: Catalog, files: list[Path]) -> dict[str, ExperimentSpec]:
    """Experiments from `files`, each checked against the catalog's systems, workloads and images."""
    found: dict[str, tuple[ExperimentSpec, Path, yaml.Node]] = {}
    for path in files:
        for data, node in _entries(path):
            entry = parse_entry(ExperimentSpec, data, node, path)
            found[entry.id] = (entry, path, node)  # later search dirs override earlier ones
    experiments = {name: entry for name, (entry, _, _) in found.items()}
    for entry, path, node in found.values():
        for loc, message in experiment_problems(entry, catalog.systems, catalog.workloads, catalog.images,
                                                experiments):
            raise CatalogError(f"{path}:{_line_of(node, loc) or 1}: {'.'.join(str(p) for p in loc)}: {message}")
    return experiments


def load_catalog(host: HostFacts | None = None) -> Catalog:
    """Every catalog entry on the search path; with `host`, also system `localhost` and images `host` and
    `host-tf` made from those facts (a file may override any of them by name)."""
    images = {"host": host_image(host), "host-tf": host_tf_image(host)} if host else {}
    images.update(_collect_images(_files("images")))
    systems = {"localhost": localhost_system(host)} if host else {}
    systems.update(_collect(SystemSpec, _files("systems")))
    return Catalog(images=images, workloads=_collect(WorkloadSpec, _files("workloads")), systems=systems)
