"""One way to register every kind of extension: models, datasets, feature sets, graph constructions,
samplers, metrics, importers.

    MODELS = Registry("model")

    @MODELS.register("sage")
    class SAGE(GNN): ...

    MODELS.get("sage")          # or a one-line error: unknown model 'sagee' (did you mean 'sage'?; choose from ...)

A registry whose entries live in the modules of a package discovers them itself (``package=``): every
module of the package is imported the first time the registry is read, so adding an entry is adding
one file, with no import list to keep.
"""
from __future__ import annotations

import difflib
import importlib
import pkgutil
from typing import Generic, Iterator, TypeVar

from fourdb.errors import FourdbError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, package: str | None = None):
        self.kind, self.package = kind, package
        self._entries: dict[str, T] = {}
        self._discovered = package is None

    def register(self, name: str, entry: T | None = None):
        """``REGISTRY.register(name, entry)``, or as a decorator: ``@REGISTRY.register(name)``."""
        def add(obj: T) -> T:
            if name in self._entries and self._entries[name] is not obj:
                raise FourdbError(f"{self.kind} '{name}' is registered twice")
            self._entries[name] = obj
            return obj

        return add(entry) if entry is not None else add

    def _discover(self) -> None:
        if not self._discovered:
            self._discovered = True
            pkg = importlib.import_module(self.package)
            for info in pkgutil.iter_modules(pkg.__path__):
                importlib.import_module(f"{self.package}.{info.name}")

    def get(self, name: str) -> T:
        self._discover()
        if name not in self._entries:
            close = difflib.get_close_matches(str(name), list(self._entries), n=1, cutoff=0.5)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise FourdbError(f"unknown {self.kind} '{name}'{hint}; choose from {', '.join(self.names())}")
        return self._entries[name]

    def names(self) -> list[str]:
        self._discover()
        return sorted(self._entries)

    def items(self) -> Iterator[tuple[str, T]]:
        self._discover()
        return iter(sorted(self._entries.items()))

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __contains__(self, name: str) -> bool:
        self._discover()
        return name in self._entries

    def __len__(self) -> int:
        self._discover()
        return len(self._entries)

