"""tokenfactory's plug-in API: what a controller, a reallocator or a router is written against.

    from tokenfactory import AdmissionDecision, AdmissionReason, ControlConfig, Observation

- every controller: `ControlConfig` (what it is built with), `Observation` and
  `PoolObservation` (what it sees);
- admission (the fast loop): `AdmissionPolicy`, `AdmissionDecision`, `AdmissionReason`,
  and `DecisionError` (what a decision of the wrong shape raises); `LoopModel`, what a
  policy's optional `loop_model(config)` returns (its linearised loop);
- reallocation (the slow loop): `ReallocationPolicy`, `ReallocDecision`, `ReallocReason`,
  `Move`;
- routing: `RoutingPolicy`, `FillCandidate`, and `is_midfill(prefix_tokens, new_tokens)`,
  the built-in router's rule for which fill pool a call's work belongs to;
- `tokenfactory.kit`: the stability kit (needs Hypothesis; docs/plugins.md).

These names stay put while the modules that implement them move (a name leaves
only after a release in which it warns). Everything here is re-exported from where it is implemented,
so `tokenfactory.Observation is orchestrator.control.observe.Observation`.
"""

from costmodel.fill_phase import is_midfill
from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation, PoolObservation
from orchestrator.control.policies.base import (
    AdmissionDecision,
    AdmissionPolicy,
    AdmissionReason,
    DecisionError,
)
from orchestrator.control.realloc import Move, ReallocationPolicy, ReallocDecision, ReallocReason
from orchestrator.control.router import FillCandidate, RoutingPolicy
from orchestrator.control.stability import LoopModel

# The public names; tests/unit/test_public_api.py pins this list.
__all__ = [
    "AdmissionDecision",
    "AdmissionPolicy",
    "AdmissionReason",
    "ControlConfig",
    "DecisionError",
    "FillCandidate",
    "LoopModel",
    "Move",
    "Observation",
    "PoolObservation",
    "ReallocDecision",
    "ReallocReason",
    "ReallocationPolicy",
    "RoutingPolicy",
    "is_midfill",
]


def __getattr__(name: str) -> object:
    # The kit needs Hypothesis (a dev dependency): imported when first named, not with
    # the interfaces.
    if name == "kit":
        import importlib

        return importlib.import_module("tokenfactory.kit")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
