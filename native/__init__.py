"""The compiled core: which of the project's modules run as C extensions, and the guard
that reads a module as Python when its compiled copy must not be used.

A module with a Cython ``.pxd`` file beside it (``storage/links.pxd`` for
``storage/links.py``) is compiled at install time when a C compiler is there
(``setup.py``; https://cython.readthedocs.io/en/latest/src/tutorial/pure.html). The
``.pxd`` only declares types (its classes as extension types with typed fields, the
types of hot methods' locals): the ``.py`` stays the one source, runs unchanged where
nothing was compiled, and gives the same results value for value
(``tests/test_native.py`` checks whole replays both ways).

Python would import a compiled module in preference to its source even after the
source changed. Importing this package (every top-level package of the project does)
puts a finder first on ``sys.meta_path`` that reads every compiled module from its
``.py`` instead when

- any of them is older than its ``.py`` or ``.pxd``, or was not built (an edit, a
  checkout, a failed build: one warning on stderr; ``make build`` compiles them again).
  All or none, because compiled modules use each other's types
  (``workers/kv_links.pxd`` cimports ``storage.links``' fabric); or
- the environment sets ``TOKENFACTORY_PURE=1`` (pure Python on purpose: to compare, or
  to profile with Python-level tools, which do not see inside compiled code).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

PURE_ENV = "TOKENFACTORY_PURE"
# The project's top-level packages (pyproject.toml's package list, this one aside).
PACKAGES = ("costmodel", "orchestrator", "storage", "traces", "workers")
_ROOT = Path(__file__).resolve().parent.parent


def pure_requested(environ: Mapping[str, str] = os.environ) -> bool:
    """True when the environment asks for pure Python (TOKENFACTORY_PURE set, not "0")."""
    return environ.get(PURE_ENV, "") not in ("", "0")


def stale(source: Path, compiled: Path) -> bool:
    """True when `compiled` is older than `source` or than the .pxd beside it."""
    built = compiled.stat().st_mtime
    pxd = source.with_suffix(".pxd")
    return (source.stat().st_mtime > built
            or (pxd.exists() and pxd.stat().st_mtime > built))


def compiled_copy(source: Path) -> Path | None:
    """The extension module built from `source` (same folder, same name), if any."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = source.with_name(source.stem + suffix)
        if candidate.is_file():
            return candidate
    return None


def declared(root: Path = _ROOT) -> list[Path]:
    """The sources with a .pxd beside them under `root` (none in an installed wheel,
    which ships no .pxd)."""
    return [pxd.with_suffix(".py") for package in PACKAGES
            for pxd in sorted((root / package).rglob("*.pxd"))
            if pxd.with_suffix(".py").is_file()]


def why_python(sources: list[Path], pure: bool) -> str | None:
    """Why the compiled copies of `sources` must not be used (None: use them)."""
    if pure:
        return f"{PURE_ENV} is set"
    built = [compiled_copy(source) for source in sources]
    if not any(built):
        return None  # nothing compiled: nothing to guard
    for source, compiled in zip(sources, built, strict=True):
        if compiled is None:
            return f"{source.name} has no compiled copy"
        if stale(source, compiled):
            return f"{compiled.name} is older than {source.name} or its .pxd"
    return None


def _module_name(source: Path, root: Path = _ROOT) -> str:
    return ".".join(source.with_suffix("").relative_to(root).parts)


class _SourceWhenStale(importlib.abc.MetaPathFinder):
    """Reads the compiled modules from their .py when they must not be used (decided
    once, when the guard is installed); hands every other import to the next finders."""

    def __init__(self) -> None:
        sources = declared()
        self.reason = why_python(sources, pure_requested())
        self.read_as_python = ({_module_name(s): s for s in sources if compiled_copy(s)}
                               if self.reason else {})
        if self.reason and not pure_requested() and self.read_as_python:
            print(f"tokenfactory: {self.reason}: the compiled core runs as Python (same "
                  f"results, slower); `make build` compiles it again", file=sys.stderr)

    def find_spec(self, fullname, path, target=None):
        source = self.read_as_python.get(fullname)
        if source is None:
            return None
        return importlib.util.spec_from_file_location(fullname, source)


def _installed() -> _SourceWhenStale:
    for finder in sys.meta_path:
        if isinstance(finder, _SourceWhenStale):
            return finder
    finder = _SourceWhenStale()
    sys.meta_path.insert(0, finder)
    return finder


GUARD = _installed()


def _with_compiled_copy(root: Path = _ROOT) -> list[Path]:
    """The sources with a compiled copy beside them under `root`: what an installed
    wheel compiled (it ships no .pxd, and needs no guard: its copies cannot go stale)."""
    return [source for package in PACKAGES
            for source in sorted((root / package).rglob("*.py")) if compiled_copy(source)]


def status() -> dict[str, str]:
    """Per declared module (in an installed wheel: per compiled module): "compiled", or
    "python" and why (imports each module)."""
    out = {}
    for source in declared() or _with_compiled_copy():
        name = _module_name(source)
        module = importlib.import_module(name)
        if isinstance(getattr(module, "__loader__", None),
                      importlib.machinery.ExtensionFileLoader):
            out[name] = "compiled"
        else:
            out[name] = "python: " + (GUARD.reason or "not built")
    return out


def summary() -> str:
    """One line for a benchmark's or a version's output: how many modules run compiled."""
    modules = status()
    compiled = sum(v == "compiled" for v in modules.values())
    if not modules:
        return "compiled core: none declared"
    why = sorted({v.partition(": ")[2] for v in modules.values() if v != "compiled"})
    tail = f" (the others run as Python: {'; '.join(why)})" if why else ""
    return f"compiled core: {compiled} of {len(modules)} modules compiled{tail}"
