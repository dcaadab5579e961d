"""`admit-all`: no admission control, the baseline the controllers are held against.

Every queued call is released at once, on every arrival and completion as well as
every fast-loop period (`event_driven`, as `local`): what a service without an
admission gate does. Decode's KV budget and the ready buffer still hold what decode
cannot take. Its oscillation index is the traffic's own (docs/control.md, "The fills
split as the router should": at 32 slots, 4x, seeds 1-4, and on the unseen sessions at
8x, `retire`'s index is 1.21-3.14x it), and the kit's reference row is it
(docs/plugins.md).
"""

from __future__ import annotations

from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation
from orchestrator.control.policies.base import AdmissionDecision, AdmissionReason

_HOLD = AdmissionDecision(0, AdmissionReason.HOLD)


class AdmitAllAdmission:
    name = "admit-all"
    event_driven = True  # decide on every arrival and completion, on the queue as it is

    def __init__(self, config: ControlConfig) -> None:
        self.config = config

    def decide(self, obs: Observation | None, now_s: float) -> AdmissionDecision:
        if obs is None or obs.admission_queue <= 0:
            return _HOLD
        return AdmissionDecision(obs.admission_queue, AdmissionReason.ADMIT_ALL)

    def skip_idle(self, obs: Observation, first_s: float, ticks: int) -> AdmissionDecision:
        """Exact: no state, so the decision on an unchanged observation repeats."""
        return self.decide(obs, first_s)

    def loop_model(self, config: ControlConfig) -> None:
        """None: no loop closes through it."""
        return None
