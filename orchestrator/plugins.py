"""Controllers by name or import path: the built-ins and a user's own, loaded one way.

`--controller NAME` looks NAME up in the entry point group `tokenfactory.controllers`
(where the built-ins `retire`, `buffered` and `predictive` are registered, and where a
user's package can register its own); `--controller pkg.module:Class` imports it
(modules are found on the Python path and in the current directory). The factory is
called with the run's `ControlConfig`, and with `base_target_batch=` too if it takes
that keyword; what it returns must have a `name` and a `decide(observation, now_s)`.
Every failure is one line naming the policy.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from importlib.metadata import entry_points

from orchestrator.config import ControlConfig
from orchestrator.policies.base import AdmissionPolicy, PluginError

CONTROLLER_GROUP = "tokenfactory.controllers"


def registered() -> dict[str, object]:
    """Entry points of the controller group, by name."""
    return {ep.name: ep for ep in entry_points(group=CONTROLLER_GROUP)}


def _import(spec: str):
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise PluginError(f"controller {spec!r}: expected module:attribute")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.append(cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginError(f"controller {spec!r}: cannot import {module_name!r}: {exc}") from None
    except Exception as exc:  # the user's module raised while importing
        raise PluginError(f"controller {spec!r}: importing {module_name!r} raised "
                          f"{type(exc).__name__}: {exc}") from None
    target = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise PluginError(f"controller {spec!r}: {module_name!r} has no attribute {part!r}")
        target = getattr(target, part)
    return target


def _factory(spec: str):
    if ":" in spec:
        return _import(spec)
    eps = registered()
    if spec not in eps:
        known = ", ".join(sorted(eps)) or "none registered"
        raise PluginError(f"unknown controller {spec!r}; known: {known} "
                          f"(or give module:Class)")
    try:
        return eps[spec].load()
    except Exception as exc:
        raise PluginError(f"controller {spec!r}: its entry point failed to load: {exc}") from None


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
    return policy
