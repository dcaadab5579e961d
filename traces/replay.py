"""Replay semantics: when sessions start, and how load is scaled.

Sessions start at times the replay chooses; inside a session each call is
issued its (scaled) think gap after the previous call's answer completes,
so a slow cluster slows the agents down as it would in life. That closed
loop is run by the orchestrator; this module fixes the start times.

Start times, session by session:
- with `sessions_per_hour` given: a Poisson process at that rate (seeded),
  whatever the trace's own timestamps;
- otherwise a session with its own start time (open-loop traces: Mooncake,
  Azure, native files with `arrival_s`) starts then;
- otherwise (agent sessions carry no clock) a Poisson process at
  `DEFAULT_AGENT_SESSIONS_PER_HOUR`.
Admission stops after `max_sessions` sessions; sessions that would start at
or after `duration_s` are not admitted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from traces.model import Call, Session

# One new agent session a minute: the 113-session collection then starts
# within about two hours, and its median session (about an hour of think
# and tool time) overlaps some sixty others, enough to load a small pool.
DEFAULT_AGENT_SESSIONS_PER_HOUR = 60.0


def _positive(name: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name}: expected a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """How hard a replay drives the trace. A LoadOptions that exists is valid."""

    sessions_per_hour: float | None = None
    max_sessions: int | None = None
    think_scale: float = 1.0
    duration_s: float | None = None
    repeat: int = 1  # replay the trace this many times over, each copy as new sessions

    def __post_init__(self) -> None:
        _positive("sessions_per_hour", self.sessions_per_hour)
        _positive("duration_s", self.duration_s)
        if self.max_sessions is not None and (
            isinstance(self.max_sessions, bool)
            or not isinstance(self.max_sessions, int)
            or self.max_sessions <= 0
        ):
            raise ValueError(f"max_sessions: expected an integer > 0, got {self.max_sessions!r}")
        if isinstance(self.repeat, bool) or not isinstance(self.repeat, int) or not (
                1 <= self.repeat <= MAX_REPEAT):
            raise ValueError(f"repeat: expected an integer 1..{MAX_REPEAT}, got {self.repeat!r}")
        if (
            isinstance(self.think_scale, bool)
            or not isinstance(self.think_scale, int | float)
            or not math.isfinite(self.think_scale)
            or self.think_scale < 0
        ):
            raise ValueError(
                f"think_scale: expected a finite number >= 0, got {self.think_scale!r}"
            )

    def think_s(self, call: Call) -> float:
        """The gap to wait after the previous answer before issuing `call`."""
        return call.think_s * self.think_scale


# Copy k of a repeated trace shifts every block id by k << REPEAT_SHIFT: above any id a
# reader hands out (namespace << 40 | local id, namespaces well under 2**20), so copies
# never share blocks by accident, as sessions of different files never do.
REPEAT_SHIFT = 60
MAX_REPEAT = 1000


def repeat_sessions(sessions: Iterable[Session], times: int) -> Iterator[Session]:
    """The sessions, then `times - 1` more copies of them as new sessions (ids suffixed
    `~k`, block ids shifted): a small trace made into a long one."""
    kept = []
    for session in sessions:
        kept.append(session)
        yield session
    for k in range(1, times):
        shift = k << REPEAT_SHIFT
        for session in kept:
            sid = f"{session.session_id}~{k}"
            calls = tuple(replace(c, session_id=sid, block_ids=tuple(b + shift for b in c.block_ids))
                          for c in session.calls)
            yield replace(session, session_id=sid, calls=calls)


def session_starts(
    sessions: Iterable[Session], load: LoadOptions, rng: np.random.Generator
) -> Iterator[tuple[float, Session]]:
    """(start time in seconds, session) in admission order; see the module doc."""
    poisson_rate = load.sessions_per_hour or DEFAULT_AGENT_SESSIONS_PER_HOUR
    mean_gap_s = 3600.0 / poisson_rate
    clock_s = 0.0
    admitted = 0
    for session in repeat_sessions(sessions, load.repeat):
        if load.max_sessions is not None and admitted >= load.max_sessions:
            return
        if load.sessions_per_hour is None and session.start_s is not None:
            start_s = session.start_s
        else:
            clock_s += float(rng.exponential(mean_gap_s))
            start_s = clock_s
            if load.duration_s is not None and start_s >= load.duration_s:
                return  # the Poisson clock only moves forward
        if load.duration_s is not None and start_s >= load.duration_s:
            continue  # an own-timestamp session too late; later files may start earlier
        admitted += 1
        yield start_s, session
