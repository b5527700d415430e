"""Backends by name, registered the way ReFrame registers its schedulers and launchers.

Each kind has an explicit table of backend name -> the module that defines it. A module is imported the
first time one of its names is looked up (so `dlrun --help` imports no backend, and a backend whose
optional dependency is missing breaks only the runs that choose it); its classes register themselves with
`@REGISTRY.register(name)`. A name registered twice, or not declared, is a programming error.
The tables are data (module paths as strings), so the lower layers can check a name without importing the
backends above them.

A site adds backends without editing this file: an installed distribution declares each in the entry-point
group of its kind (`dlrun.runtimes`, `dlrun.launchers`, `dlrun.schedulers`, `dlrun.engines`), the entry
point's name being the backend's name and its value the module that registers it, e.g. in pyproject.toml

    [project.entry-points."dlrun.runtimes"]
    mycontainer = "mysite.dlrun_backends.mycontainer"

The groups are read once per process, when a name is not a built-in one or every name is listed; a site
name that is also a built-in name (or two sites' same name) is refused with one line.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from dlrun.errors import DlrunError, unknown_name

T = TypeVar("T")


@dataclass(frozen=True)
class Tool:
    """A program a backend runs on the submitting or compute node, and how to get it."""

    command: str  #: the executable that must be on PATH
    install: str  #: how to install it (package, module or project)


class BackendUnavailable(DlrunError):
    """A chosen backend's module cannot be imported here (an optional dependency is missing)."""

    exit_code = 2


class Registry(Generic[T]):
    def __init__(self, kind: str, modules: Mapping[str, str], *, group: str):
        self.kind = kind
        #: The entry-point group through which installed distributions add backends of this kind.
        self.group = group
        self._builtin = dict(modules)
        self._site: dict[str, str] | None = None
        self._classes: dict[str, type[T]] = {}

    def _site_modules(self) -> dict[str, str]:
        """{name: module} of the backends installed distributions declare in this kind's entry-point group."""
        if self._site is None:
            from importlib.metadata import entry_points  # 10-30 ms: only when a name is not a built-in one

            found: dict[str, str] = {}
            for point in entry_points(group=self.group):
                module = point.value.partition(":")[0].strip()
                if point.name in self._builtin or (point.name in found and found[point.name] != module):
                    taken = self._builtin.get(point.name) or found[point.name]
                    raise DlrunError(f"{self.kind} {point.name!r} of entry point group {self.group} ({module}) is "
                                     f"already {taken}; valid: a name no other {self.kind} has", exit_code=2)
                found[point.name] = module
            self._site = found
        return self._site

    def _module(self, name: str) -> str | None:
        return self._builtin.get(name) or self._site_modules().get(name)

    def register(self, *names: str) -> Callable[[type[T]], type[T]]:
        def add(cls: type[T]) -> type[T]:
            for name in names:
                module = self._module(name)
                if module is None:
                    raise RuntimeError(f"{self.kind} {name!r} ({cls.__module__}) is declared neither in "
                                       f"dlrun.registry nor in entry point group {self.group}")
                if module != cls.__module__:
                    raise RuntimeError(f"{self.kind} {name!r} is declared in {module}, not {cls.__module__}")
                if name in self._classes and self._classes[name] is not cls:
                    raise RuntimeError(f"{self.kind} {name!r} is already registered by "
                                       f"{self._classes[name].__qualname__}")
                self._classes[name] = cls
            return cls
        return add

    def names(self) -> list[str]:
        return sorted({**self._builtin, **self._site_modules()})

    def check(self, name: str) -> str:
        """`name` if it is a backend of this kind, else the one-line usage error with the closest match."""
        if self._module(name) is None:
            raise unknown_name(self.kind, name, self.names())
        return name

    def get_class(self, name: str) -> type[T]:
        self.check(name)
        if name not in self._classes:
            module = self._module(name)
            try:
                importlib.import_module(module)  # type: ignore[arg-type]
            except ImportError as exc:
                raise BackendUnavailable(f"{self.kind} {name} cannot be used here: {exc}") from None
            if name not in self._classes:
                raise RuntimeError(f"{module} did not register {self.kind} {name!r}")
        return self._classes[name]

    def get(self, name: str) -> T:
        return self.get_class(name)(name)  # type: ignore[call-arg]

    def available(self) -> dict[str, T]:
        """Every backend of this kind that can be loaded here, by name."""
        found = {}
        for name in self.names():
            try:
                found[name] = self.get(name)
            except BackendUnavailable:
                continue
        return found


RUNTIMES: Registry = Registry("runtime", {
    "host": "dlrun.runtimes.host",
    "singularity": "dlrun.runtimes.singularity",
    "apptainer": "dlrun.runtimes.singularity",
    "docker": "dlrun.runtimes.docker",
    "podman": "dlrun.runtimes.docker",
    "docker-api": "dlrun.runtimes.docker",
    "charliecloud": "dlrun.runtimes.charliecloud",
    "enroot": "dlrun.runtimes.enroot",
}, group="dlrun.runtimes")
LAUNCHERS: Registry = Registry("launcher", {
    "none": "dlrun.launchers.single",
    "mpirun": "dlrun.launchers.mpirun",
    "srun": "dlrun.launchers.srun",
    "jsrun": "dlrun.launchers.jsrun",
    "torchrun": "dlrun.launchers.torchrun",
    "horovodrun": "dlrun.launchers.horovodrun",
}, group="dlrun.launchers")
SCHEDULERS: Registry = Registry("scheduler", {
    "local": "dlrun.schedulers.local",
    "slurm": "dlrun.schedulers.slurm",
    "lsf": "dlrun.schedulers.lsf",
    "pbs": "dlrun.schedulers.pbs",
    "kubernetes": "dlrun.schedulers.kubernetes",
}, group="dlrun.schedulers")
# `dlrun images build|pull|push|save|load|verify|lock --engine NAME` (dlrun.images.engines).
ENGINES: Registry = Registry("engine", {
    "docker": "dlrun.images.engines.docker",
    "docker-api": "dlrun.images.engines.docker",
    "podman": "dlrun.images.engines.docker",
    "singularity": "dlrun.images.engines.singularity",
    "apptainer": "dlrun.images.engines.singularity",
    "charliecloud": "dlrun.images.engines.charliecloud",
    "debootstrap": "dlrun.images.engines.charliecloud",
    "enroot": "dlrun.images.engines.enroot",
}, group="dlrun.engines")
