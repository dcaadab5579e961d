"""Delay compensation: the present state predicted from a lagged observation.

A Smith predictor (O. J. M. Smith, "Closer control of loops with dead time", Chemical
Engineering Progress 53, 1957): a controller that sees its plant `lag` seconds late
acts on a model's prediction of the present instead, the lagged measurement plus what
the model says happened since, so the delay leaves the loop and only the model's error
is fed back late. Here the plant is the set of admitted calls not yet completed (the
decode slots and the pipeline that feeds them), and what happened since the
observation is known to the orchestrator in part exactly and in part by its model:

- the calls it admitted since, and when: its own admissions log (the count exact: the
  orchestrator's admissions counter against the observation's `admitted_total`);
- the calls that completed since: not seen until a later observation arrives, so
  predicted by its own learnt service model. A call joins decode when its fill is done
  (the predictor's fill latency after admission; at once for calls already filled) and
  then completes at the model's per-call rate (its decode rate at the target batches
  over the slots: a mean decode time T, memoryless), so a call in decode since `e` has
  completed by `now` with probability 1 - exp(-(now - e) / T); and decode completes no
  more than its rate allows. The rate is scaled by a correction learnt from the lagged
  observations themselves: completions counted between two of them against what this
  model predicted for that span.

The calls being filled now (what the admitting policy bounds where the fills bind) are
the observation's, plus the admissions since, less the fills predicted done since: at
the rate calls left the fill pipeline between the last lagged observations (into decode,
the ready buffer or a KV load, or completed), never fewer than the admissions of the last
predicted fill latency. Where fills queue a call's dead time from admission to decode is
that queue's, not the model's fill latency: the rate measured is what drains it.

Nothing here reads the plant: `Observation`s (lagged), the admissions counter and the
time are its inputs. `PresentEstimate` is pure state, advanced by `observe` and
`admitted`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from orchestrator.control.observe import Observation

# The correction learns over about this long (s): a few observation lags, so it follows
# the service's drift (batch, context, the slow loop's moves) but not one period's noise.
CORRECTION_TIME_S = 30.0
# It is held within these bounds: a model off by more than 4x is not corrected, it is
# wrong, and an empty decode gives no evidence.
CORRECTION_BOUNDS = (0.25, 4.0)


def completions_predicted(obs: Observation, now_s: float,
                          admissions: Iterable[tuple[float, int]] = (),
                          correction: float = 1.0) -> float:
    """Calls predicted to complete between `obs` and `now_s`: those decoding, filled or
    loading at the observation (in decode from its time), those being filled (in decode
    a fill latency later) and `admissions` since, (time, calls) (in decode a fill latency
    after their admission), each completing at the model's per-call rate times
    `correction`; at most decode's rate over the span."""
    span = now_s - obs.time_s
    rate = correction * obs.predicted_decode_calls_per_s  # calls a second, decode full
    if span <= 0 or obs.decode_slots <= 0 or rate <= 0:
        return 0.0
    mean_s = obs.decode_slots / rate  # a call's decode time at the target batch

    def done(entered_s: float) -> float:
        return 0.0 if entered_s >= now_s else -math.expm1(-(now_s - entered_s) / mean_s)

    fill_s = obs.predicted_fill_latency_s
    filled = obs.decode_running + obs.ready_depth + obs.decode_loading
    expected = filled * done(obs.time_s) + (obs.fill_queue + obs.fill_running) * done(
        obs.time_s + fill_s)
    expected += sum(n * done(t + fill_s) for t, n in admissions)
    return min(expected, rate * span)


def left_fill(obs: Observation) -> int:
    """Calls that had left the fill pipeline by the observation: completed (fills that
    need no decode among them), decoding (draining workers' too), loading or ready."""
    return (obs.completed_total + obs.decode_running + obs.decode_draining
            + obs.decode_loading + obs.ready_depth)


def in_system(obs: Observation) -> int:
    """Calls admitted and not completed at the observation: decoding or on their way."""
    return obs.decode_running + obs.backlog


@dataclass
class PresentEstimate:
    """The Smith predictor's state: the orchestrator's admissions log and the learnt
    correction of the model's completion rate."""

    correction_time_s: float = CORRECTION_TIME_S
    _log: deque = field(default_factory=deque)  # (time, calls admitted then), oldest first
    _admitted_total: int = 0  # the admissions counter, as last told
    _last: Observation | None = None
    _measured: float = 0.0  # completions counted, exponentially forgotten
    _predicted: float = 0.0  # completions the model predicted for the same spans
    _fill_rate: float | None = None  # calls leaving the fill pipeline a second, smoothed

    @property
    def correction(self) -> float:
        """Measured over predicted completions (1 until the model has predicted a call)."""
        if self._predicted < 1.0:
            return 1.0
        lo, hi = CORRECTION_BOUNDS
        return min(max(self._measured / self._predicted, lo), hi)

    def admitted(self, admitted_total: int, now_s: float) -> None:
        """The admissions counter after a release at `now_s` (the orchestrator's own log)."""
        if admitted_total > self._admitted_total:
            self._log.append((now_s, admitted_total - self._admitted_total))
            self._admitted_total = admitted_total

    def _since(self, admitted_total_then: int, until_s: float | None = None) -> list:
        """The log's newest entries (up to `until_s`) holding the admissions after the
        counter read `admitted_total_then`: the count exact, their times the log's."""
        total = self._admitted_total
        out: list[tuple[float, int]] = []
        for t, n in reversed(self._log):
            if until_s is not None and t > until_s:
                total -= n
                continue
            left = total - admitted_total_then
            if left <= 0:
                break
            out.append((t, min(n, left)))
            total -= n
        return out

    @property
    def fill_rate(self) -> float:
        """Calls a second that left the fill pipeline, over the lagged observations
        (0 until two have been seen)."""
        return self._fill_rate or 0.0

    def in_fill(self, obs: Observation, now_s: float) -> float:
        """Calls being filled now, predicted: those queued at or in a fill at the
        observation and those admitted since, less the fills done since at the rate the
        pipeline was measured to drain, at least the admissions of the last fill latency
        the model predicts (none of them can be filled yet); at most those seen there plus
        those admissions (the model's view: older admissions filled, none of those seen)."""
        admitted = self._since(obs.admitted_total)
        since_s = now_s - obs.predicted_fill_latency_s
        recent = sum(n for t, n in admitted if t >= since_s)
        seen = obs.fill_queue + obs.fill_running
        drained = self.fill_rate * max(0.0, now_s - obs.time_s)
        measured = max(float(recent), seen + sum(n for _, n in admitted) - drained)
        # The model's view (the admissions older than a fill latency filled, none of the
        # calls seen there) where it says fewer: before a drain is measured, and where the
        # fills run at the model's pace.
        return min(measured, float(seen + recent))

    def observe(self, obs: Observation) -> None:
        """Learn from a new lagged observation: the completions counted since the last one
        against what the model predicted from the last one for that span; forget the log
        from before the last one."""
        last = self._last
        if last is not None and obs.time_s <= last.time_s:
            return
        if last is not None:
            span = obs.time_s - last.time_s
            forget = math.exp(-span / self.correction_time_s)
            admitted = self._since(last.admitted_total, until_s=obs.time_s)
            self._measured = self._measured * forget + (obs.completed_total
                                                        - last.completed_total)
            self._predicted = self._predicted * forget + completions_predicted(
                last, obs.time_s, admitted)
            # Never below 0: a worker lost sends its calls back to be filled again.
            rate = max(0.0, left_fill(obs) - left_fill(last)) / span
            self._fill_rate = rate if self._fill_rate is None else (
                rate + forget * (self._fill_rate - rate))
            while self._log and self._log[0][0] < last.time_s:
                self._log.popleft()
        self._last = obs

    def present_in_system(self, obs: Observation, now_s: float) -> float:
        """Calls admitted and not completed now, predicted: those at the observation, plus
        the orchestrator's admissions since (exact), less the completions its corrected
        model predicts since."""
        admitted = self._since(obs.admitted_total)
        gone = completions_predicted(obs, now_s, admitted, self.correction)
        return max(0.0, in_system(obs) + sum(n for _, n in admitted) - gone)
