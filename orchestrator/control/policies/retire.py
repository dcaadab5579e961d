"""`retire`: admit on decode retirements (the anti-pattern the source essay names).

Implemented as a reasonable engineer would write it, and no worse: each
period, admit as many new calls as decode has slots that retirements have
freed, as the controller sees decode through the observation lag. It looks at
decode alone and does not count calls already admitted and still in the fill
pipeline. A freed slot therefore stays visible, and is admitted into again,
for every period until the call admitted for it reaches decode (observation
lag plus fill time): admission overshoots, the excess congests the fill
pools and the ready buffer, decode fills, admission stops while the excess
drains, decode starves while new admissions travel the pipeline, and the
cycle repeats.
"""

from __future__ import annotations

from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation
from orchestrator.control.policies.base import AdmissionDecision, AdmissionReason
from orchestrator.control.stability import LoopModel


class RetireAdmission:
    name = "retire"

    def __init__(self, config: ControlConfig) -> None:
        self.starving_below = config.retire_starvation_occupancy
        self._last_retired: int | None = None

    def decide(self, obs: Observation | None, now_s: float) -> AdmissionDecision:
        if obs is None:
            return AdmissionDecision(0, AdmissionReason.NO_OBSERVATION)
        retired = obs.retired_total - (self._last_retired
                                       if self._last_retired is not None else obs.retired_total)
        self._last_retired = obs.retired_total
        free = max(0, obs.decode_slots - obs.decode_running - obs.decode_loading)
        if free == 0:
            return AdmissionDecision(0, AdmissionReason.HOLD)
        # Freed slots with decode starving is the "retaliation" of the essay's loop.
        starving = obs.decode_occupancy < self.starving_below
        reason = AdmissionReason.RETALIATION if starving or not retired else (
            AdmissionReason.RETIREMENTS)
        return AdmissionDecision(free, reason)

    def skip_idle(self, obs: Observation, first_s: float, ticks: int) -> AdmissionDecision:
        """Exact: with the observation unchanged the decision is, and the retired count
        it remembers stays that observation's."""
        return self.decide(obs, first_s)

    def loop_model(self, config: ControlConfig) -> LoopModel:
        """Free slots admitted every period T, seen again only once the admitted calls
        reach decode: an integrator over T, delayed by the observation lag and the
        pipeline (L(s) = e^{-(lag + D) s} / (T s))."""
        return LoopModel(numerator=(1.0,), denominator=(config.fast_period_s, 0.0),
                         delay_s=config.observation_lag_s, period_s=config.fast_period_s,
                         through_pipeline=True)
