"""Name -> backend class registries for runtimes, launchers and schedulers."""
from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from dlrun.errors import unknown_name

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, type[T]] = {}

    def register(self, *names: str) -> Callable[[type[T]], type[T]]:
        def add(cls: type[T]) -> type[T]:
            for name in names:
                self._entries[name] = cls
            return cls
        return add

    def names(self) -> list[str]:
        return sorted(self._entries)

    def get(self, name: str) -> T:
        if name not in self._entries:
            raise unknown_name(self.kind, name, self._entries)
        return self._entries[name](name)  # type: ignore[call-arg]
