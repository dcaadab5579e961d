"""Names a module held before they moved to another module: served from the old path,
with a DeprecationWarning naming the new one, so that an import users wrote keeps working
(the public API's promise, README). Modules that moved whole are
`orchestrator._moved`'s; this is for names that left a module that stayed."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping


def moved_names(old_module: str, moved: Mapping[str, str]) -> Callable[[str], object]:
    """The module `__getattr__` for `old_module`, whose names in `moved` now live in the
    module each maps to: it warns and returns the new module's object; any other name is
    an AttributeError, as without it."""
    def __getattr__(name: str) -> object:
        new = moved.get(name)
        if new is None:
            raise AttributeError(f"module {old_module!r} has no attribute {name!r}")
        warnings.warn(f"{old_module}.{name} moved to {new}.{name}: the old path is deprecated",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(new), name)

    return __getattr__
