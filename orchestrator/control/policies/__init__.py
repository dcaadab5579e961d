"""Admission policies by name. Each implements `AdmissionPolicy` (see `base`); the
built-ins are registered by name as entry points (pyproject.toml,
`tokenfactory.controllers`), looked up by `orchestrator.plugins`."""

from __future__ import annotations

from orchestrator.control.config import ControlConfig
from orchestrator.control.policies.admit_all import AdmitAllAdmission
from orchestrator.control.policies.base import (
    AdmissionDecision,
    AdmissionPolicy,
    AdmissionReason,
    PluginError,
)
from orchestrator.control.policies.binding import BindingAdmission
from orchestrator.control.policies.buffered import BufferedAdmission
from orchestrator.control.policies.local import LocalAdmission
from orchestrator.control.policies.predictive import PredictiveAdmission
from orchestrator.control.policies.retire import RetireAdmission
from orchestrator.control.policies.smith import SmithAdmission, SmithPoolsAdmission


def make_policy(name: str, config: ControlConfig, base_target_batch: int = 4) -> AdmissionPolicy:
    """A controller by registered name or `module:Class` (see orchestrator.plugins)."""
    from orchestrator.plugins import load_policy

    return load_policy(name, config, base_target_batch)


UnknownPolicyError = PluginError


__all__ = ["AdmissionDecision", "AdmissionPolicy", "AdmissionReason", "AdmitAllAdmission",
           "BindingAdmission",
           "BufferedAdmission", "LocalAdmission", "PluginError", "PredictiveAdmission",
           "RetireAdmission", "SmithAdmission", "SmithPoolsAdmission",
           "make_policy"]
