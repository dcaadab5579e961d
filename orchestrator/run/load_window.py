"""The load a run got and the window it is measured in (docs/metrics.md, "Load window").

- load window: from the first session start plus 10% of (last start - first start)
  to the last start: the span in which sessions are being started, their ramp-up
  left out; the drain after the last start, when no session arrives any more and
  the load falls away (at recorded think times, for simulated hours), is left out
  too. A run whose sessions all start at one instant uses 10% to 90% of the
  simulated time instead. The control figures, `throughput.window` and
  `goodput.window` are all taken over it;
- sessions asked for: `--max-sessions`, or, with `--sessions-per-hour R` and
  `--duration S`, the R x S / 3600 a Poisson process at R starts in S on average
  (the smaller when both are given); none otherwise (the trace's own timestamps,
  or every session it has);
- sessions per hour achieved: sessions started over the span they were asked to
  start in, `--duration` when given, else from the run's start to the last start.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.run.result import ReplayResult
from traces.replay import MAX_REPEAT, LoadOptions

WARMUP = 0.10


def window_bounds_s(result: ReplayResult) -> tuple[float, float]:
    """The load window's start and end (module docstring)."""
    span = result.last_session_s - result.first_session_s
    if span > 0:
        return result.first_session_s + WARMUP * span, result.last_session_s
    return WARMUP * result.simulated_s, (1 - WARMUP) * result.simulated_s


def window_rates(result: ReplayResult, good: Sequence[bool]) -> tuple[dict, dict]:
    """(throughput, goodput) inside the load window: output tokens per second of the calls
    that completed in it, all of them and those that met their targets (`good`, one flag
    per completed call), over the window's length. None when the window is empty."""
    lo, hi = window_bounds_s(result)
    if hi <= lo:
        empty = {"output_tokens_per_s": None, "output_tokens_per_s_per_gpu": None}
        return dict(empty), dict(empty)
    calls = result.requests
    tokens = good_tokens = 0
    for out, done, ok in zip(calls.column("output_tokens"), calls.column("done_s"), good,
                             strict=True):
        if done == done and lo <= done <= hi:  # NaN: not done
            tokens += out
            good_tokens += out if ok else 0
    return tuple({"output_tokens_per_s": n / (hi - lo),
                  "output_tokens_per_s_per_gpu": n / (hi - lo) / result.gpus,
                  "start_s": lo, "end_s": hi} for n in (tokens, good_tokens))


@dataclass(frozen=True)
class Shortfall:
    """A trace with fewer sessions than the load asked for."""

    asked: float  # sessions asked for (module docstring)
    available: int  # the trace's sessions x --repeat
    repeat_needed: int  # the --repeat that has enough, at most MAX_REPEAT

    def note(self, load: LoadOptions) -> str:
        """One stderr line: the figures, and how --repeat gets the load."""
        if load.max_sessions is not None and (load.sessions_per_hour is None
                                              or load.duration_s is None
                                              or load.max_sessions <= self.asked):
            what = f"--max-sessions {load.max_sessions:,} asks for {self.asked:,.0f} sessions"
        else:
            what = (f"--sessions-per-hour {load.sessions_per_hour:g} for --duration "
                    f"{load.duration_s:g} s asks for about {self.asked:,.0f} sessions")
        trace = self.available // load.repeat
        has = (f"{trace:,}" if load.repeat == 1
               else f"{trace:,}, {self.available:,} with --repeat {load.repeat}")
        fix = (f"--repeat {self.repeat_needed} replays it {self.repeat_needed} times over "
               f"({self.repeat_needed * trace:,} sessions)")
        return (f"warning: the trace runs out before the load asked for: {what}, the trace "
                f"has {has}, so at most {self.available:,} start and the load falls short "
                f"(load.sessions_started, load.sessions_per_hour_achieved); {fix}")


def asked_sessions(load: LoadOptions) -> float | None:
    """Sessions the load options ask for (module docstring), None when they ask for none."""
    asked = []
    if load.max_sessions is not None:
        asked.append(float(load.max_sessions))
    if load.sessions_per_hour is not None and load.duration_s is not None:
        asked.append(load.sessions_per_hour * load.duration_s / 3600.0)
    return min(asked) if asked else None


def shortfall(load: LoadOptions, trace_sessions: int) -> Shortfall | None:
    """The shortfall when the trace (x --repeat) has fewer sessions than asked, else None."""
    asked = asked_sessions(load)
    available = trace_sessions * load.repeat
    if asked is None or trace_sessions <= 0 or round(asked) <= available:
        return None
    return Shortfall(asked, available, min(MAX_REPEAT, math.ceil(asked / trace_sessions)))


def load_figures(result: ReplayResult, load: LoadOptions | None,
                 trace_sessions: int | None) -> dict:
    """The summary's `load`: sessions asked for, available and started, the rate achieved
    (module docstring), and whether the trace ran out before the asked-for load."""
    lo, hi = window_bounds_s(result)
    span = (load.duration_s if load is not None and load.duration_s is not None
            else result.last_session_s)
    short = (shortfall(load, trace_sessions)
             if load is not None and trace_sessions is not None else None)
    return {
        "sessions_started": result.sessions,
        "sessions_available": (trace_sessions * load.repeat
                               if load is not None and trace_sessions is not None else None),
        "sessions_asked": asked_sessions(load) if load is not None else None,
        "sessions_per_hour_asked": load.sessions_per_hour if load is not None else None,
        "sessions_per_hour_achieved": (result.sessions / span * 3600.0
                                       if span and span > 0 else None),
        "trace_ran_out": short is not None,
        "first_start_s": result.first_session_s, "last_start_s": result.last_session_s,
        "window_s": {"start": lo, "end": hi},
    }
