"""Admission policies by name. Each implements `AdmissionPolicy` (see `base`)."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.control.config import ControlConfig
from orchestrator.control.policies.base import (
    AdmissionDecision,
    AdmissionPolicy,
    AdmissionReason,
    PluginError,
)
from orchestrator.control.policies.buffered import BufferedAdmission
from orchestrator.control.policies.local import LocalAdmission
from orchestrator.control.policies.predictive import PredictiveAdmission
from orchestrator.control.policies.retire import RetireAdmission

BUILTIN: dict[str, Callable[..., AdmissionPolicy]] = {
    "retire": RetireAdmission,
    "buffered": BufferedAdmission,
    "predictive": PredictiveAdmission,
    "local": LocalAdmission,
}


def make_policy(name: str, config: ControlConfig, base_target_batch: int = 4) -> AdmissionPolicy:
    """A controller by registered name or `module:Class` (see orchestrator.plugins)."""
    from orchestrator.plugins import load_policy

    return load_policy(name, config, base_target_batch)


UnknownPolicyError = PluginError


__all__ = ["BUILTIN", "AdmissionDecision", "AdmissionPolicy", "AdmissionReason", "PluginError",
           "make_policy"]
