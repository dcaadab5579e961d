"""Build: the modules with a Cython .pxd beside them are compiled when a C compiler is
there; without one (or with TOKENFACTORY_PURE=1) the install is pure Python, with the
same results (native/__init__.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))  # the build backend does not put the project on the path

import native  # noqa: E402 (which modules are compiled, and the pure-Python switch)

# Python semantics everywhere (division, negative indices, bounds, overflow checks):
# the .pxd files add types, never a change of behaviour.
DIRECTIVES = {"language_level": 3, "annotation_typing": False, "binding": False}
# Cython and the C compiler run on every core: the build is most of a fresh clone's
# `make test` set-up (17 modules, ~90 s of CPU).
_JOBS = os.cpu_count() or 1


def _skip(why: str) -> list:
    print(f"tokenfactory: the core is not compiled ({why}); it runs as Python, with the "
          f"same results", file=sys.stderr)
    return []


def _extensions() -> list:
    if native.pure_requested():
        return _skip(f"{native.PURE_ENV} is set")
    try:
        from Cython.Build import cythonize
    except ImportError:
        return _skip("Cython is not installed")
    try:
        sources = [str(source.relative_to(ROOT)) for source in native.declared(ROOT)]
        return cythonize(sources, compiler_directives=DIRECTIVES, quiet=True,
                         nthreads=_JOBS)
    except Exception as exc:  # a Cython error: the build goes on as Python
        return _skip(f"Cython failed: {exc}")


class OptionalBuildExt(build_ext):
    """Builds what it can; a module that fails to compile (no C compiler, no Python
    headers) stays Python."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            _skip(f"the C build failed: {exc}")

    def build_extension(self, ext) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            _skip(f"{ext.name} failed to build: {exc}")


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
