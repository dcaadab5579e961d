"""`smith-pools` whose fill bound follows the fill pipeline's measured drain where that is
fewer than decode's predicted completions (docs/control.md, "The map at f882903": tried
on the preset at think x0.02, 2x, where `smith-pools` trails `local`, and not kept: its
goodput there moved within what a 0.1 s change of the cushion moves it). `smith`'s fill
bound holds the calls being filled to decode's completions over the cushion; on the
preset decode's 384 slots make that larger than anything the fills hold. Here it is the
smaller of that and the calls the fills hold at the drain the lagged observations
measured (`PresentEstimate.fill_rate`; no oracle), each for its predicted fill latency
plus the cushion (Little's law). Use it as `--controller examples.smith_drain:Drain`
from a checkout's root.
"""

from orchestrator.control.observe import Observation
from orchestrator.control.policies.smith import SmithPoolsAdmission


class Drain(SmithPoolsAdmission):
    name = "smith-pools-drain"

    def held_in_fill(self, obs: Observation) -> float:
        """The calls the fills may hold: decode's completions over the cushion, or the
        measured drain over a fill and the cushion where that is fewer."""
        decode = self.service_rate(obs) * self.cushion_s
        drain = self.estimate.fill_rate
        if drain <= 0:  # no drain measured yet
            return decode
        return min(decode, drain * (obs.predicted_fill_latency_s + self.cushion_s))

    def fill_room(self, obs: Observation, now_s: float) -> float:
        return self.held_in_fill(obs) - self.estimate.in_fill(obs, now_s)
