"""Old import paths of modules that moved: each warns, then serves the new module's names.

The control core moved from orchestrator/ into orchestrator/control/ and the run shell
into orchestrator/run/ (ef2cb09). A controller or script written against the old paths
keeps working: importing one raises a DeprecationWarning naming the new path (and, for
the plug-in interfaces, the `tokenfactory` package that holds them from now on), and
every name is looked up in the new module, so it is the very same object.

A shim module at an old path is three lines:

    from orchestrator import _moved
    __getattr__, __dir__ = _moved.forward(__name__, "orchestrator.control.observe")
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping
from types import FrameType

# The old paths, for the tests and for readers: old module -> new module. Modules that
# held plug-in interfaces also point to `tokenfactory`.
MOVED: dict[str, str] = {
    "orchestrator.config": "orchestrator.control.config",
    "orchestrator.observe": "orchestrator.control.observe",
    "orchestrator.policies": "orchestrator.control.policies",
    "orchestrator.policies.base": "orchestrator.control.policies.base",
    "orchestrator.policies.buffered": "orchestrator.control.policies.buffered",
    "orchestrator.policies.predictive": "orchestrator.control.policies.predictive",
    "orchestrator.policies.retire": "orchestrator.control.policies.retire",
    "orchestrator.realloc": "orchestrator.control.realloc",
    "orchestrator.router": "orchestrator.control.router",
    "orchestrator.snapshot": "orchestrator.run.sampler",
    "orchestrator.control.snapshot": "orchestrator.run.sampler",
    "orchestrator.stability": "orchestrator.control.stability",
    "orchestrator.demo": "orchestrator.run.demo",
    "orchestrator.metrics": "orchestrator.run.metrics",
    "orchestrator.metrics_listener": "orchestrator.run.metrics_listener",
    "orchestrator.openmetrics": "orchestrator.run.openmetrics",
    "orchestrator.output": "orchestrator.run.output",
    "orchestrator.reconfig": "orchestrator.run.reconfig",
    "orchestrator.replay": "orchestrator.run.replay",
    "orchestrator.report": "orchestrator.run.report",
    "orchestrator.result": "orchestrator.run.result",
    "orchestrator.series": "orchestrator.run.series",
    "orchestrator.sessions": "orchestrator.run.sessions",
    "orchestrator.summary": "orchestrator.run.summary",
    "orchestrator.tables": "orchestrator.run.tables",
    "orchestrator.trace_events": "orchestrator.run.trace_events",
}
PLUGIN_API = frozenset({"orchestrator.config", "orchestrator.observe", "orchestrator.policies",
                        "orchestrator.policies.base", "orchestrator.realloc",
                        "orchestrator.router"})
# Names an old module had that have since moved on to another module than its own.
ALSO: dict[str, dict[str, str]] = {
    "orchestrator.replay": {"PolicyError": "orchestrator.run.plugin_checks"},
}


def message(old: str, new: str) -> str:
    hint = "; plug-ins import these names from tokenfactory" if old in PLUGIN_API else ""
    return f"{old} moved to {new}: the old path is deprecated{hint}"


def _importer(shim: FrameType) -> FrameType:
    """The frame whose import ran the shim's body `shim`: past the import system's frames
    and any loader's `exec_module` (pytest's assertion rewriter is one: `warnings`'
    stacklevel skips importlib's own frames only)."""
    frame = shim.f_back
    while frame.f_back is not None and (frame.f_code.co_name == "exec_module" or (
            "importlib" in frame.f_code.co_filename
            and "_bootstrap" in frame.f_code.co_filename)):
        frame = frame.f_back
    return frame


def forward(old: str, new: str) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """Warn that `old` moved to `new`, at the line that imported it (`forward` is called
    from the old module's body); return the module `__getattr__` and `__dir__` that
    serve `new`'s names (and `ALSO`'s) from `old`."""
    frame = _importer(sys._getframe(1))
    warnings.warn_explicit(message(old, new), DeprecationWarning, frame.f_code.co_filename,
                           frame.f_lineno, module=frame.f_globals.get("__name__", "<string>"),
                           registry=frame.f_globals.setdefault("__warningregistry__", {}),
                           module_globals=frame.f_globals)
    module = importlib.import_module(new)
    also: Mapping[str, str] = ALSO.get(old, {})

    def __getattr__(name: str) -> object:
        if name in also:
            return getattr(importlib.import_module(also[name]), name)
        if name == "__all__":  # `from old import *`: what it gives from the new module
            return getattr(module, "__all__", None) or [
                n for n in vars(module) if not n.startswith("_")]
        try:
            return getattr(module, name)
        except AttributeError:
            raise AttributeError(f"module {old!r} (now {new!r}) has no attribute {name!r}",
                                 name=name, obj=module) from None

    def __dir__() -> list[str]:
        return sorted({*dir(module), *also})

    return __getattr__, __dir__
