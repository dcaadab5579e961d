"""A PI admission controller, written against tokenfactory's public interface.

Admits at the cost core's predicted decode rate plus a proportional-integral
correction on the backlog (admitted calls not yet decoding) against a target of
`target_s` seconds of decode service. Run it:

    tokenfactory compare --controllers retire,buffered,examples.pi_admission:PIAdmission
"""

from __future__ import annotations

from tokenfactory import AdmissionDecision, AdmissionReason, ControlConfig, Observation


class PIAdmission:
    name = "pi"

    def __init__(self, config: ControlConfig, kp: float = 0.2, ki: float = 0.02,
                 target_s: float = 10.0) -> None:
        self.period_s = config.fast_period_s
        self.kp, self.ki, self.target_s = kp, ki, target_s
        self.integral = 0.0
        self.credit = 0.0

    def decide(self, obs: Observation | None, now_s: float) -> AdmissionDecision:
        if obs is None:
            return AdmissionDecision(admit=0, reason=AdmissionReason.NO_OBSERVATION)
        rate = obs.predicted_decode_calls_per_s
        error = rate * self.target_s - obs.backlog  # calls short of the target backlog
        # Anti-windup: stop integrating while the output is pinned at zero.
        if rate + self.kp * error + self.ki * self.integral > 0 or error > 0:
            self.integral += error * self.period_s
        admit_rate = max(0.0, rate + self.kp * error + self.ki * self.integral)
        self.credit += admit_rate * self.period_s
        admit = int(self.credit)
        self.credit -= admit
        reason = AdmissionReason.BACKLOG_LOW if error > 0 else AdmissionReason.BACKLOG_HIGH
        return AdmissionDecision(admit=admit, reason=reason)
