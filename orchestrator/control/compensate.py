"""Delay compensation: the present state predicted from a lagged observation.

A Smith predictor (O. J. M. Smith, "Closer control of loops with dead time", Chemical
Engineering Progress 53, 1957): a controller that sees its plant `lag` seconds late
acts on a model's prediction of the present instead, the lagged measurement plus what
the model says happened since, so the delay leaves the loop and only the model's error
is fed back late. Here the plant is the set of admitted calls not yet completed (the
decode slots and the pipeline that feeds them), and what happened since the
observation is known to the orchestrator in part exactly and in part by its model:

- the calls it admitted since: its own count (exact: the orchestrator's admissions
  counter against the observation's `admitted_total`);
- the calls that completed since: not seen until a later observation arrives, so
  predicted from its own learnt service model (`predicted_decode_calls_per_s`, the
  predictor's decode rate at the target batches, orchestrator.control.predictor), at
  the observed decode occupancy, over the time since the observation, scaled by a
  correction it learns from its own lagged observations: completions counted between
  two of them against what the model predicted for that span.

Nothing here reads the plant: an `Observation` (lagged), the admissions counter and the
time are its inputs. `PresentEstimate` is pure state, advanced by `observe`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.control.observe import Observation

# The correction learns over about this long (s): a few observation lags, so it follows
# the service's drift (batch, context, the slow loop's moves) but not one period's noise.
CORRECTION_TIME_S = 30.0
# It is held within these bounds: a model off by more than 4x is not corrected, it is
# wrong, and an empty decode gives no evidence.
CORRECTION_BOUNDS = (0.25, 4.0)


def completions_predicted(obs: Observation, span_s: float, correction: float = 1.0) -> float:
    """Calls predicted to complete over `span_s` after `obs`: each decoding sequence
    retires at the model's per-slot rate (its decode rate at the target batches over the
    slots), scaled by `correction`. At most the calls decoding and on their way (the
    model cannot complete calls that are not there)."""
    if span_s <= 0 or obs.decode_slots <= 0:
        return 0.0
    per_slot_per_s = obs.predicted_decode_calls_per_s / obs.decode_slots
    predicted = correction * per_slot_per_s * obs.decode_running * span_s
    return min(predicted, float(obs.decode_running + obs.backlog))


def in_system(obs: Observation) -> int:
    """Calls admitted and not completed at the observation: decoding or on their way."""
    return obs.decode_running + obs.backlog


@dataclass
class PresentEstimate:
    """The Smith predictor's state: the learnt correction of the model's completion rate,
    from pairs of lagged observations."""

    correction_time_s: float = CORRECTION_TIME_S
    _last: Observation | None = None
    _measured: float = 0.0  # completions counted, exponentially forgotten
    _predicted: float = 0.0  # completions the model predicted for the same spans

    @property
    def correction(self) -> float:
        """Measured over predicted completions (1 until the model has predicted a call)."""
        if self._predicted < 1.0:
            return 1.0
        lo, hi = CORRECTION_BOUNDS
        return min(max(self._measured / self._predicted, lo), hi)

    def observe(self, obs: Observation) -> None:
        """Learn from a new lagged observation: the completions counted since the last one
        against what the model predicted from the last one for that span."""
        last = self._last
        if last is not None and obs.time_s > last.time_s:
            span = obs.time_s - last.time_s
            forget = math.exp(-span / self.correction_time_s)
            self._measured = self._measured * forget + (obs.completed_total
                                                        - last.completed_total)
            self._predicted = self._predicted * forget + completions_predicted(last, span)
        if last is None or obs.time_s > last.time_s:
            self._last = obs

    def present_in_system(self, obs: Observation, admitted_total_now: int,
                          now_s: float) -> float:
        """Calls admitted and not completed now, predicted: those at the observation, plus
        the orchestrator's admissions since (exact), less the completions its corrected
        model predicts since."""
        admitted_since = max(0, admitted_total_now - obs.admitted_total)
        gone = completions_predicted(obs, now_s - obs.time_s, self.correction)
        return max(0.0, in_system(obs) + admitted_since - gone)
