"""`smith-pools` admitting into fill only the calls it predicts a decode slot for when
their fill ends (docs/control.md, "The compensated controllers where admission binds":
tried where `smith-pools` left `local`'s p99 TTFT unmet, and not kept). Its decode target
(the slots plus the completions predicted over the cushion) is taken over the time a call
released now is predicted to take to be filled instead, when that is shorter than the
cushion: from its own lagged facts and learnt model only (the fill pipeline's measured
drain, `PresentEstimate.fill_rate`; no oracle). Use one as
`--controller examples.smith_fill_end:FillEnd` (or another class here) from a checkout's
root.

- `FillEnd`: the calls in fill drained at the measured rate, then a fill of its own (the
  model's fill latency).
- `FillEndLittle`: the calls in fill over the measured rate (Little's law: a call's time
  in the fill pipeline, queued and filled), no fill of its own added.
- `FillEndPools`: `FillEndLittle`'s target for the calls of a busy fill pool only (in its
  per-pool cap), `smith-pools`' for the others.
- `FillLatency`: over the model's fill latency alone (no queue); `Decode4`: over 4 s,
  the fill bound still over the 8 s cushion.
"""

from orchestrator.control.observe import Observation
from orchestrator.control.policies.base import AdmissionDecision, AdmissionReason
from orchestrator.control.policies.smith import POOL_BINDS, SmithAdmission, SmithPoolsAdmission


class FillEnd(SmithPoolsAdmission):
    name = "smith-pools-fill-end"

    def fill_horizon_s(self, obs: Observation, now_s: float) -> float:
        """Seconds until a call released now has been filled, predicted (the cushion until
        a drain has been measured)."""
        rate = self.estimate.fill_rate
        if rate <= 0:
            return self.cushion_s
        return self.estimate.in_fill(obs, now_s) / rate + obs.predicted_fill_latency_s

    def at_fill_end(self, obs: Observation, now_s: float, decode: float) -> float:
        """The room under the decode target taken at the fill's end, from `decode`, the
        room under the target taken over the cushion."""
        short_s = self.cushion_s - min(self.fill_horizon_s(obs, now_s), self.cushion_s)
        return decode - self.service_rate(obs) * short_s

    def rooms(self, obs: Observation, now_s: float) -> tuple[float, float]:
        decode, fill = super().rooms(obs, now_s)
        return self.at_fill_end(obs, now_s, decode), fill


class FillEndLittle(FillEnd):
    name = "smith-pools-fill-end-little"

    def fill_horizon_s(self, obs: Observation, now_s: float) -> float:
        rate = self.estimate.fill_rate
        if rate <= 0:
            return self.cushion_s
        return self.estimate.in_fill(obs, now_s) / rate


class FillEndPools(FillEndLittle):
    name = "smith-pools-fill-end-pools"

    def rooms(self, obs: Observation, now_s: float) -> tuple[float, float]:
        return SmithAdmission.rooms(self, obs, now_s)

    def decide(self, obs: Observation | None, now_s: float) -> AdmissionDecision:
        if obs is None:
            return AdmissionDecision(0, AdmissionReason.NO_OBSERVATION)
        self._learn_busy(obs)
        decode, fill = self.rooms(obs, now_s)
        at_end = self.at_fill_end(obs, now_s, decode)
        busy = [p for p, share in self.busy.items() if share >= POOL_BINDS]
        if len(busy) == len(self.busy):  # every fill pool busy (or none seen yet)
            room = int(min(at_end, fill))
            return AdmissionDecision(max(room, 0), AdmissionReason.PREDICTED_ROOM
                                     if room > 0 else AdmissionReason.HOLD)
        room = int(decode)
        if room <= 0:
            return AdmissionDecision(0, AdmissionReason.HOLD)
        limits = {p: max(0, int(min(fill, at_end))) for p in busy}
        return AdmissionDecision(room, AdmissionReason.PREDICTED_ROOM, pool_limits=limits)


class FillLatency(FillEnd):
    name = "smith-pools-fill-latency"

    def fill_horizon_s(self, obs: Observation, now_s: float) -> float:
        return obs.predicted_fill_latency_s


class Decode4(FillEnd):
    name = "smith-pools-decode-4s"

    def fill_horizon_s(self, obs: Observation, now_s: float) -> float:
        return 4.0
