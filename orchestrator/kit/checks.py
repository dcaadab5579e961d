"""Checks a user calls on a replay: each failure says what, when (simulated time), how much.

Every check takes a `ReplayResult` (from `run_scenario` or a replay) and raises
`StabilityViolation` (an AssertionError, so pytest and Hypothesis treat it as a
failed test) or returns None.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from orchestrator.run.replay import ReplayResult
from orchestrator.run.summary import oscillation, starvation


class StabilityViolation(AssertionError):
    """What was violated (`what`), when in simulated time (`when_s`, or None) and the
    measured figure against its bound (`by`)."""

    def __init__(self, message: str, what: str = "", when_s: float | None = None,
                 by: str = "") -> None:
        super().__init__(message)
        self.what, self.when_s, self.by = what or message, when_s, by


class PropertyFailed(StabilityViolation):
    """A kit property's failure, as one short paragraph: the property, the controller,
    the measured figure against its bound, the scope, and the counterexample file (the
    scenario Hypothesis shrank to) with the command that replays it."""

    def __init__(self, message: str, prop: str = "", controller: str = "",
                 scope: str = "", path: str = "", violation: StabilityViolation | None = None
                 ) -> None:
        v = violation or StabilityViolation(message)
        super().__init__(message, v.what, v.when_s, v.by)
        self.prop, self.controller, self.scope, self.path = prop, controller, scope, path

    @classmethod
    def of(cls, violation: StabilityViolation, prop: str, controller: str, scope: str,
           path: str, about: str) -> PropertyFailed:
        """The paragraph for `violation` of `prop` by `controller`; `about`: a few words on
        the counterexample (its size, what it holds)."""
        at = f", at t={violation.when_s:.1f} s simulated" if violation.when_s is not None else ""
        message = "\n".join([
            f"kit property {prop} failed for {controller}: {violation.what}",
            f"  measured: {violation.by or violation.what}{at}",
            f"  scope: {scope}",
            f"  counterexample: {path} ({about})",
            f"  replay it: tokenfactory replay --from-counterexample {path}"])
        return cls(message, prop, controller, scope, str(path), violation)


def _fail(what: str, when_s: float | None, by: str) -> None:
    at = f" at t={when_s:.1f} s" if when_s is not None else ""
    raise StabilityViolation(f"{what}{at}: {by}", what, when_s, by)


def buffer_bound(result: ReplayResult) -> int:
    """ceil(B*) + A(L + 2T) of docs/metrics.md, from the run's own predictions."""
    c = result.control
    rate = result.predicted_decode_calls_per_s
    target = rate * (result.predicted_fill_latency_s + c.ready_buffer_s)
    arrivals = np.sort([r.arrival_s for r in result.requests] + list(result.rejected_arrivals_s))
    width = c.observation_lag_s + 2 * c.fast_period_s
    burst = int(max(np.searchsorted(arrivals, arrivals + width, side="right")
                    - np.arange(len(arrivals)))) if len(arrivals) else 0
    return math.ceil(target) + burst


def bounded_buffers(result: ReplayResult, bound: int | None = None) -> None:
    """Admission queue, admitted backlog and ready buffer never above `bound` (default:
    the buffered controller's derived bound)."""
    limit = buffer_bound(result) if bound is None else bound
    s = result.series
    for name in ("admission_queue", "backlog", "ready_depth"):
        values = getattr(s, name)
        if values and max(values) > limit:
            i = int(np.argmax(values))
            _fail(f"{name.replace('_', ' ')} above its bound", s.time_s[i],
                  f"{values[i]} > {limit} (by {values[i] - limit})")


def no_loss(result: ReplayResult) -> None:
    """Every call completed or was rejected by the end; none completed twice; at every
    sample submitted = completed + rejected + in flight."""
    s, c = result.series, result.counters
    for t, sub, done, rej, fly in zip(s.time_s, s.submitted_total, s.completed_total,
                                      s.rejected_total, s.in_flight, strict=True):
        if sub != done + rej + fly:
            _fail("conservation broken", t, f"submitted {sub} != completed {done} + rejected "
                  f"{rej} + in flight {fly}")
    ids = [r.call_id for r in result.requests]
    if len(ids) != len(set(ids)):
        _fail("a call completed twice", None, f"{len(ids) - len(set(ids))} duplicate(s)")
    left = c["submitted"] - c["completed"] - c["rejected"]
    if left:
        _fail("calls never completed", result.simulated_s,
              f"{left} of {c['submitted']} still in flight when the run ended")


def no_reconfiguration_in_dead_band(result: ReplayResult) -> None:
    band = result.control.realloc_threshold
    for t, d in zip(result.realloc_times_s, result.realloc_decisions, strict=True):
        if d.move is not None and abs(d.imbalance) <= band:
            _fail("reconfigured inside the dead band", t,
                  f"|imbalance| {abs(d.imbalance):.3f} <= {band}")


def no_faster_than_dwell(result: ReplayResult) -> None:
    dwell = result.control.realloc_dwell_s
    times = [t for t, d in zip(result.realloc_times_s, result.realloc_decisions, strict=True)
             if d.move is not None]
    for a, b in itertools.pairwise(times):
        if b - a < dwell:
            _fail("reconfigured faster than the dwell time", b,
                  f"{b - a:.1f} s after the previous move < {dwell:g} s")


def oscillation_below(result: ReplayResult, max_index: float) -> None:
    index = oscillation(result)["oscillation_index"]
    if index > max_index:
        _fail("decode occupancy oscillates", result.last_session_s,
              f"oscillation index {index:.3f} > {max_index} (by {index - max_index:.3f})")


def starvation_below(result: ReplayResult, max_fraction: float) -> None:
    fraction = starvation(result)
    if fraction > max_fraction:
        _fail("decode starves while work waits", result.last_session_s,
              f"starvation fraction {fraction:.3f} > {max_fraction} "
              f"(by {fraction - max_fraction:.3f})")
