"""`smith`: admission on the predicted present, its observation lag compensated.

`local` (today's engines) decides at every event on the cluster as it is; the
orchestrator's own controllers see it `lag` seconds late (scraped metrics), and the
map (docs/control.md) shows `buffered` at a 5 s lag trailing `local`. `smith` keeps
the lag and removes it from the loop with a Smith predictor
(orchestrator.control.compensate): the calls admitted and not completed now are
predicted from the lagged observation, plus the orchestrator's own admissions since
(its admissions log), less the completions its learnt service model predicts since
(each call in decode a fill latency after its admission, then completing at the
predictor's per-call decode rate, corrected by what its lagged observations later
counted). It admits up to a target, every decode slot filled plus a cushion of
predicted completions (calls filled ahead, as buffered's ready buffer), and holds the
calls on their way (in fill, or admitted within the last predicted fill latency) to
that cushion too.

It decides every fast-loop period and on every arrival (the admission queue is the
orchestrator's own: a call arriving is known at once), each time on the newest lagged
observation: between two periods the predicted completions grow with the time, so an
arrival is admitted as soon as the model says a slot has come free. It never sees a
completion before its observation does.
"""

from __future__ import annotations

import math

from orchestrator.control.compensate import PresentEstimate
from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation
from orchestrator.control.policies.base import AdmissionDecision, AdmissionReason
from orchestrator.control.stability import LoopModel

# Seconds of predicted completions admitted beyond the decode slots, as buffered's
# ready buffer (ControlConfig.ready_buffer_s): covers the model's error over the lag, and
# calls that complete together (equal outputs started together: a memoryless model
# spreads their completions; 2 s starved decode in the kit's overload scenarios).
CUSHION_S = 8.0

_HOLD = AdmissionDecision(0, AdmissionReason.HOLD)


class SmithAdmission:
    name = "smith"
    decides_on_arrival = True  # the shell asks at every arrival too, on the lagged view

    def __init__(self, config: ControlConfig, cushion_s: float = CUSHION_S) -> None:
        if not (math.isfinite(cushion_s) and cushion_s >= 0):
            raise ValueError(f"cushion_s: expected seconds >= 0, got {cushion_s!r}")
        self.config = config
        self.cushion_s = cushion_s
        self.estimate = PresentEstimate()

    def on_admitted(self, admitted_total: int, now_s: float) -> None:
        """The shell's admissions counter after it released calls (its own log)."""
        self.estimate.admitted(admitted_total, now_s)

    def service_rate(self, obs: Observation) -> float:
        """Decode's completions a second, full, as the corrected model predicts them."""
        return obs.predicted_decode_calls_per_s * self.estimate.correction

    def target_in_system(self, obs: Observation) -> float:
        """Calls admitted and not completed to aim for: the decode slots, plus the
        completions predicted over the cushion (the fill pipeline's and the ready
        buffer's content: where fills bind, more admitted only waits at the fill
        workers, routed before their prefix's worker is free)."""
        return obs.decode_slots + self.service_rate(obs) * self.cushion_s

    def fill_room(self, obs: Observation, now_s: float) -> float:
        """Where the fills bind (a cold prefix each new session), calls admitted beyond
        what decode takes over the cushion only queue at the fill workers, routed before
        their prefix's worker is free: the calls being filled are held to the cushion's
        predicted completions, as local holds them to its free slots."""
        return self.service_rate(obs) * self.cushion_s - self.estimate.in_fill(obs, now_s)

    def decide(self, obs: Observation | None, now_s: float) -> AdmissionDecision:
        if obs is None:
            return AdmissionDecision(0, AdmissionReason.NO_OBSERVATION)
        self.estimate.observe(obs)
        present = self.estimate.present_in_system(obs, now_s)
        room = int(min(self.target_in_system(obs) - present, self.fill_room(obs, now_s)))
        if room <= 0:
            return _HOLD
        return AdmissionDecision(room, AdmissionReason.PREDICTED_ROOM)

    def loop_model(self, config: ControlConfig) -> LoopModel:
        """With its model right, the predictor takes the lag out of the loop: it admits the
        predicted shortfall every period, an integrator over T with no delay
        (L(s) = 1 / (T s); Smith 1957). The model's error is what it feeds back late:
        this loop does not show that."""
        return LoopModel(numerator=(1.0,), denominator=(config.fast_period_s, 0.0),
                         delay_s=0.0, period_s=config.fast_period_s)
