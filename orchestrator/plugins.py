"""Controllers by name or import path: the built-ins and a user's own, loaded one way.

`--controller NAME` looks NAME up in the entry point group `tokenfactory.controllers`
(where the built-ins `retire`, `buffered` and `predictive` are registered, and where a
user's package can register its own); `--controller pkg.module:Class` imports it
(modules are found on the Python path and in the current directory; a DeprecationWarning
raised by the user's module, such as an old import path's, is shown). The factory is
called with the run's `ControlConfig`, and with `base_target_batch=` too if it takes
that keyword; what it returns must have a `name` and a `decide(observation, now_s)`.
Every failure is one line naming the policy.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
import warnings
from importlib.metadata import entry_points

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


def _import(spec: str, kind: str = "controller"):
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise PluginError(f"{kind} {spec!r}: expected module:attribute")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.append(cwd)
    try:
        with warnings.catch_warnings():
            # Shown: a DeprecationWarning raised by the user's own modules (an import path
            # that moved, orchestrator._moved), which Python hides outside __main__.
            top = re.escape(module_name.partition(".")[0])
            warnings.filterwarnings("default", category=DeprecationWarning,
                                    module=rf"{top}(\.|$)")
            module = importlib.import_module(module_name)
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
        raise PluginError(f"unknown {kind} {spec!r}; known: {known} (or give module:Class)")
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
    observed_facts(policy)  # an unknown fact named in `observes`: one line, before the run
    return policy
