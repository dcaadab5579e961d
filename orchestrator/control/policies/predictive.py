"""`predictive`: delay-compensated admission plus early rejection (as Mooncake's scheduler does).

Calls whose predicted time to first token, at their place in the admission
queue, exceeds `reject_factor` times the TTFT target are refused before any
work is spent on them, rather than admitted to miss.

What it admits is `smith`'s (orchestrator.control.policies.smith): its observation lag
taken out by the Smith predictor of the present (orchestrator.control.compensate: the
lagged observation, plus the orchestrator's own admissions since, less the completions
its learnt service model predicts since; no oracle), decided every period and on every
arrival. The predicted wait of a queued call is its place in the queue over the rate
the queue is released at: decode's completions as that model predicts them
(`release_rate_per_s`), not one decision's count (a compensated decision admits the
room left at that instant, often none while decode is full).
"""

from __future__ import annotations

from dataclasses import replace

from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation
from orchestrator.control.policies.base import AdmissionDecision
from orchestrator.control.policies.smith import SmithAdmission
from orchestrator.control.stability import LoopModel


class PredictiveAdmission:
    name = "predictive"
    decides_on_arrival = True  # as smith: asked at every arrival too, on the lagged view

    def __init__(self, config: ControlConfig) -> None:
        self._admission = SmithAdmission(config)
        self.reject_above_s = config.ttft_target_s * config.reject_factor

    def on_admitted(self, admitted_total: int, now_s: float) -> None:
        """The shell's admissions counter after it released calls (the predictor's log)."""
        self._admission.on_admitted(admitted_total, now_s)

    def decide(self, obs: Observation | None, now_s: float) -> AdmissionDecision:
        decision = self._admission.decide(obs, now_s)
        if obs is None:
            return replace(decision, reject_ttft_above_s=self.reject_above_s)
        rate = self._admission.service_rate(obs)
        return replace(decision, reject_ttft_above_s=self.reject_above_s,
                       release_rate_per_s=rate if rate > 0 else None)

    def loop_model(self, config: ControlConfig) -> LoopModel:
        """`smith`'s loop: early rejection adds no dynamics to it."""
        return self._admission.loop_model(config)
