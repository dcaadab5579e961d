"""`predictive`: buffered admission plus early rejection (as Mooncake's scheduler does).

Calls whose predicted time to first token, at their place in the admission
queue, exceeds `reject_factor` times the TTFT target are refused before any
work is spent on them, rather than admitted to miss.
"""

from __future__ import annotations

from dataclasses import replace

from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation
from orchestrator.control.policies.base import AdmissionDecision
from orchestrator.control.policies.buffered import BufferedAdmission
from orchestrator.control.stability import LoopModel


class PredictiveAdmission:
    name = "predictive"

    def __init__(self, config: ControlConfig, base_target_batch: int = 4,
                 max_target_batch: int | None = None) -> None:
        self._buffered = BufferedAdmission(config, base_target_batch, max_target_batch)
        self.reject_above_s = config.ttft_target_s * config.reject_factor

    def decide(self, obs: Observation | None, now_s: float) -> AdmissionDecision:
        decision = self._buffered.decide(obs, now_s)
        return replace(decision, reject_ttft_above_s=self.reject_above_s)

    def skip_idle(self, obs: Observation, first_s: float, ticks: int,
                  ) -> AdmissionDecision | None:
        decision = self._buffered.skip_idle(obs, first_s, ticks)
        return None if decision is None else replace(decision,
                                                     reject_ttft_above_s=self.reject_above_s)

    def loop_model(self, config: ControlConfig) -> LoopModel:
        """Buffered's loop: early rejection adds no dynamics to it."""
        return self._buffered.loop_model(config)
