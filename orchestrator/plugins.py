"""Controllers by name or import path: the built-ins and a user's own, loaded one way.

`--controller NAME` looks NAME up in the entry point group `tokenfactory.controllers`
(where the built-ins `retire`, `buffered` and `predictive` are registered, and where a
user's package can register its own); `--controller pkg.module:Class` imports it
(modules are found on the Python path and in the current directory; a DeprecationWarning
raised by the user's module, such as an old import path's, is shown), and
`--controller path/to/file.py:Class` runs that file as a module. The factory is
called with the run's `ControlConfig`, and with `base_target_batch=` too if it takes
that keyword; what it returns must have a `name` and a `decide(observation, now_s)`.
Every failure is one line naming the policy.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
import warnings
from importlib.metadata import entry_points
from pathlib import Path

from orchestrator.control.config import ControlConfig
from orchestrator.control.policies.base import AdmissionPolicy, PluginError, observed_facts

CONTROLLER_GROUP = "tokenfactory.controllers"
GROUPS = {"controller": CONTROLLER_GROUP, "reallocator": "tokenfactory.reallocators",
          "router": "tokenfactory.routers"}
# What each kind must offer (method name) besides a `name`.
METHODS = {"controller": "decide(observation, now_s)", "reallocator": "decide(observation, now_s)",
           "router": "choose(prefix_tokens, candidates, prefix_nodes)"}


def registered(kind: str = "controller") -> dict[str, object]:
    """Entry points of a kind's group, by name."""
    return {ep.name: ep for ep in entry_points(group=GROUPS[kind])}


def _file_module_name(path: Path) -> str:
    resolved = path.resolve()
    return f"{resolved.stem}_{hashlib.sha1(str(resolved).encode()).hexdigest()[:8]}"


def _from_file(path: Path):
    """The module a `file.py:Class` spec names, run once per resolved path under a name
    of its own (so that two files named alike do not replace each other in sys.modules)."""
    if not path.is_file():
        raise ImportError(f"no file {str(path)!r}")
    resolved = path.resolve()
    name = _file_module_name(path)
    if name not in sys.modules:
        module = importlib.util.module_from_spec(
            importlib.util.spec_from_file_location(name, resolved))
        sys.modules[name] = module  # before running it: dataclasses and pickle look it up
        try:
            module.__spec__.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def _import(spec: str, kind: str = "controller"):
    from_file = ".py:" in spec
    module_name, _, attr = spec.rpartition(":") if from_file else spec.partition(":")
    if not module_name or not attr:
        raise PluginError(f"{kind} {spec!r}: expected module:attribute or file.py:attribute")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.append(cwd)
    try:
        with warnings.catch_warnings():
            # Shown: a DeprecationWarning raised by the user's own modules (an import path
            # that moved, orchestrator._moved), which Python hides outside __main__.
            top = (_file_module_name(Path(module_name)) if from_file
                   else module_name.partition(".")[0])
            warnings.filterwarnings("default", category=DeprecationWarning,
                                    module=rf"{re.escape(top)}(\.|$)")
            module = (_from_file(Path(module_name)) if from_file
                      else importlib.import_module(module_name))
    except ImportError as exc:
        raise PluginError(f"{kind} {spec!r}: cannot import {module_name!r}: {exc}") from None
    except Exception as exc:  # the user's module raised while importing
        raise PluginError(f"{kind} {spec!r}: importing {module_name!r} raised "
                          f"{type(exc).__name__}: {exc}") from None
    target = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise PluginError(f"{kind} {spec!r}: {module_name!r} has no attribute {part!r}")
        target = getattr(target, part)
    return target


def _factory(spec: str, kind: str = "controller"):
    if ":" in spec:
        return _import(spec, kind)
    eps = registered(kind)
    if spec not in eps:
        known = ", ".join(sorted(eps)) or "none registered"
        raise PluginError(f"unknown {kind} {spec!r}; known: {known} (or give module:Class or file.py:Class)")
    try:
        return eps[spec].load()
    except Exception as exc:
        raise PluginError(f"{kind} {spec!r}: its entry point failed to load: {exc}") from None


def load(kind: str, spec: str, config: ControlConfig):
    """A reallocator or router by name or module:Class, built with the run's config."""
    factory = _factory(spec, kind)
    if not callable(factory):
        raise PluginError(f"{kind} {spec!r}: {type(factory).__name__} is not callable")
    try:
        obj = factory(config)
    except Exception as exc:
        raise PluginError(f"{kind} {spec!r}: constructing it raised "
                          f"{type(exc).__name__}: {exc}") from None
    method = METHODS[kind].split("(")[0]
    if not callable(getattr(obj, method, None)):
        raise PluginError(f"{kind} {spec!r}: {type(obj).__name__} has no {METHODS[kind]} method")
    if not isinstance(getattr(obj, "name", None), str):
        raise PluginError(f"{kind} {spec!r}: {type(obj).__name__} has no name")
    return obj


def load_policy(spec: str, config: ControlConfig, base_target_batch: int = 4) -> AdmissionPolicy:
    factory = _factory(spec)
    if not callable(factory):
        raise PluginError(f"controller {spec!r}: {type(factory).__name__} is not callable")
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    kwargs = {"base_target_batch": base_target_batch} if "base_target_batch" in params else {}
    try:
        policy = factory(config, **kwargs)
    except Exception as exc:
        raise PluginError(f"controller {spec!r}: constructing it raised "
                          f"{type(exc).__name__}: {exc}") from None
    if not callable(getattr(policy, "decide", None)):
        raise PluginError(f"controller {spec!r}: {type(policy).__name__} has no "
                          f"decide(observation, now_s) method")
    name = getattr(policy, "name", None)
    if not isinstance(name, str) or not name:
        raise PluginError(f"controller {spec!r}: {type(policy).__name__} has no name")
    observed_facts(policy, f"controller {spec!r}")  # an unknown fact: one line, before the run
    return policy
