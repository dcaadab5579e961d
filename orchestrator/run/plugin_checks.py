"""A plug-in's mistakes during a run, each as one line naming it.

The run trusts what the controller, the reallocator and the router hand back only
after these checks: a decision of the wrong type, one whose fields are out of range
(refused where it is built: `AdmissionDecision`, `ReallocDecision`, `Move` raise
`DecisionError`), a move naming a pool the cluster has not, a worker the router
named that takes no calls, or an exception raised in the plug-in's own code. Each
becomes a `PolicyError` whose message names the plug-in, the field and the value,
and the line of the plug-in's file where it happened; the command line prints it
as one line with exit status 2 (docs/plugins.md).
"""

from __future__ import annotations

import inspect
import os
import traceback
from collections.abc import Iterable

from orchestrator.control.policies.base import AdmissionDecision, DecisionError
from orchestrator.control.realloc import ReallocDecision
from orchestrator.control.router import FillCandidate


class PolicyError(RuntimeError):
    """A plug-in returned something unusable or raised while deciding: names it."""


def _label(kind: str, plugin: object) -> str:
    name = getattr(plugin, "name", None)
    if not isinstance(name, str):
        name = type(plugin).__name__
    return f"{kind} {name!r}"


def _where(plugin: object, exc: BaseException) -> str:
    """` (FILE, line N)`: the last line of the plug-in's own file in the traceback (where
    its code made the bad decision or raised); empty when its file is not in it."""
    try:
        source = inspect.getsourcefile(type(plugin))
    except TypeError:  # a built-in type: no file
        return ""
    if source is None:
        return ""
    line = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename == source:
            line = lineno
    if line is None:
        return ""
    shown = os.path.relpath(source)
    return f" ({source if shown.startswith('..') else shown}, line {line})"


def plugin_failed(kind: str, plugin: object, exc: Exception) -> PolicyError:
    """The error for an exception raised while `plugin` (a `kind`) decided."""
    what = ("made a bad decision" if isinstance(exc, DecisionError)
            else f"raised {type(exc).__name__}")
    return PolicyError(f"{_label(kind, plugin)} {what}: {exc}{_where(plugin, exc)}")


def checked(decision: object, policy_name: str) -> AdmissionDecision:
    """``decision`` if it is an `AdmissionDecision`, else PolicyError naming the policy."""
    if not isinstance(decision, AdmissionDecision):
        raise PolicyError(f"controller {policy_name!r} returned {type(decision).__name__}"
                          f", not an AdmissionDecision")
    return decision


def checked_realloc(decision: object, reallocator: object,
                    pools: Iterable[str]) -> ReallocDecision:
    """``decision`` if it is a `ReallocDecision` whose move names pools of the cluster."""
    if not isinstance(decision, ReallocDecision):
        raise PolicyError(f"{_label('reallocator', reallocator)} returned "
                          f"{type(decision).__name__}, not a ReallocDecision")
    move = decision.move
    if move is not None:
        names = set(pools)
        for field in ("from_pool", "to_pool"):
            pool = getattr(move, field)
            if pool not in names:
                raise PolicyError(
                    f"{_label('reallocator', reallocator)} made a bad decision: move.{field}: "
                    f"the cluster has no pool {pool!r} (its pools: {', '.join(sorted(names))})")
    return decision


def checked_route(worker: object, router: object,
                  candidates: Iterable[FillCandidate]) -> str | None:
    """``worker`` if it is None or the name of an accepting candidate."""
    if worker is None:
        return None
    for c in candidates:
        if c.name == worker:
            if c.accepting:
                return worker
            raise PolicyError(f"{_label('router', router)} chose {worker!r}, which takes no "
                              f"calls now (accepting=False): choose an accepting candidate "
                              f"or None")
    raise PolicyError(f"{_label('router', router)} chose {worker!r}: expected the name of "
                      f"one of its candidates or None")


def takes_new_tokens(router: object) -> bool:
    """Whether `router.choose` names a `new_tokens` parameter (or takes any keyword):
    such a router is told a call's new tokens; one written for the three arguments
    alone is called with those (`RoutingPolicy`)."""
    try:
        params = inspect.signature(router.choose).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): the three
        return False
    return any(p.name == "new_tokens" or p.kind is p.VAR_KEYWORD for p in params)
