"""A call made when the job imports a module: how `fragviz run` waits for torch without importing it.

`when_imported("torch", start)` puts a finder first on sys.meta_path. When the job first imports torch, it
finds torch's spec as Python would, and runs `start(torch)` right after torch's own module code has run, on
the importing thread, before the import statement returns. The finder then leaves sys.meta_path and the
module keeps its own loader. A script that never imports torch pays nothing but the finder's name check.
Standard library only.
"""
from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any, Callable


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call `callback(module)` once the top-level module `name` is imported (at once if it already is)."""
    if name in sys.modules:
        callback(sys.modules[name])
        return
    sys.meta_path.insert(0, _Watch(name, callback))  # type: ignore[arg-type]


class _Watch:
    def __init__(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.callback = callback
        self._finding = False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name or self._finding:
            return None
        self._finding = True
        try:
            spec = importlib.util.find_spec(fullname)  # the finders after this one, as Python would ask them
        finally:
            self._finding = False
        if spec is None or spec.loader is None:
            return None  # Python says "No module named ..." as it would without us
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec.loader = _Then(spec.loader, self.callback)
        return spec


class _Then:
    """The module's own loader, then the callback."""

    def __init__(self, loader: Any, callback: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._callback = callback

    def create_module(self, spec: Any) -> Any:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._loader  # torch reads its own files through its loader, as always
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._callback(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
