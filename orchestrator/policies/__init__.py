"""Admission policies by name. Each implements `AdmissionPolicy` (see `base`)."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.config import ControlConfig
from orchestrator.policies.base import AdmissionDecision, AdmissionPolicy, AdmissionReason
from orchestrator.policies.buffered import BufferedAdmission
from orchestrator.policies.predictive import PredictiveAdmission
from orchestrator.policies.retire import RetireAdmission

BUILTIN: dict[str, Callable[..., AdmissionPolicy]] = {
    "retire": RetireAdmission,
    "buffered": BufferedAdmission,
    "predictive": PredictiveAdmission,
}


class UnknownPolicyError(ValueError):
    pass


def make_policy(name: str, config: ControlConfig, base_target_batch: int = 4,
                max_target_batch: int | None = None) -> AdmissionPolicy:
    if name not in BUILTIN:
        raise UnknownPolicyError(
            f"unknown controller {name!r}; known: {', '.join(sorted(BUILTIN))}")
    if name == "retire":
        return RetireAdmission(config)
    return BUILTIN[name](config, base_target_batch, max_target_batch)


__all__ = ["BUILTIN", "AdmissionDecision", "AdmissionPolicy", "AdmissionReason", "make_policy"]
