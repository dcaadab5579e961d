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
from functools import partial

import numpy as np

from traces.model import Call, CallsAsRead, Session, session_with_calls
from traces.shared_prefix import SharedChains, share_prefixes, shared_blocks

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
    # Leading tokens every session shares with the others (traces.shared_prefix): None,
    # as the trace hints (weka: each session's tool definitions); 0: none.
    shared_prefix_tokens: int | None = None

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
        if self.shared_prefix_tokens is not None and (
                isinstance(self.shared_prefix_tokens, bool)
                or not isinstance(self.shared_prefix_tokens, int)
                or self.shared_prefix_tokens < 0):
            raise ValueError(f"shared_prefix_tokens: expected an integer >= 0, got "
                             f"{self.shared_prefix_tokens!r}")
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


# Copy k of a repeated trace shifts the first block id of every call by k << REPEAT_SHIFT:
# above any id a reader hands out (namespace << 40 | local id, namespaces well under
# 2**20). The store's prefix trie (storage.blobs) keys every block on the chain before it,
# so a different first block puts a copy's whole call in a tree of its own: copies never
# share KV, exactly as if every id were shifted, while the rest of the ids stay the trace's
# own int objects and no copy holds a second set of them.
REPEAT_SHIFT = 60
MAX_REPEAT = 1000


def shifted_blocks(block_ids: tuple[int, ...], shift: int) -> tuple[int, ...]:
    """`block_ids` with the first id that is not of a prefix shared across sessions
    (traces.shared_prefix) moved by `shift` (one new int; the others shared): copies keep
    sharing what every session shares."""
    if not block_ids or not shift:
        return block_ids
    i = shared_blocks(block_ids)
    if i == len(block_ids):
        return block_ids  # all of it shared
    # Concatenation is two memcpys (~5 us for 1,000 ids), unpacking twice as slow.
    return block_ids[:i] + (block_ids[i] + shift,) + block_ids[i + 1:]  # noqa: RUF005


def _repeated_call(session_id: str, shift: int, base: Call) -> Call:
    """`base` as a call of the copy `session_id`, its first own block id moved by `shift`."""
    return replace(base, session_id=session_id, block_ids=shifted_blocks(base.block_ids, shift))


def repeated_session(session: Session, k: int) -> Session:
    """Copy `k` (>= 1) of `session` as a new session: id suffixed `~k`, first block ids
    shifted, calls built as they are read (`CallsAsRead`)."""
    sid = f"{session.session_id}~{k}"
    calls = CallsAsRead(session.calls, partial(_repeated_call, sid, k << REPEAT_SHIFT))
    return session_with_calls(session, calls, sid)


def repeat_sessions(sessions: Iterable[Session], times: int) -> Iterator[Session]:
    """The sessions, then `times - 1` more copies of them as new sessions (ids suffixed
    `~k`, block ids shifted as above): a small trace made into a long one. A copy costs
    next to nothing until its calls are read (`repeated_session`)."""
    kept = []
    for session in sessions:
        kept.append(session)
        yield session
    for k in range(1, times):
        for session in kept:
            yield repeated_session(session, k)


def session_starts(
    sessions: Iterable[Session], load: LoadOptions, rng: np.random.Generator,
    chains: SharedChains | None = None,
) -> Iterator[tuple[float, Session]]:
    """(start time in seconds, session) in admission order; see the module doc. Sessions
    are given their shared prefixes first (`load.shared_prefix_tokens`; `chains` counts
    what was shared)."""
    poisson_rate = load.sessions_per_hour or DEFAULT_AGENT_SESSIONS_PER_HOUR
    mean_gap_s = 3600.0 / poisson_rate
    clock_s = 0.0
    admitted = 0
    shared = share_prefixes(sessions, load.shared_prefix_tokens, chains)
    for session in repeat_sessions(shared, load.repeat):
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
        if chains is not None:
            chains.started(session)
        yield start_s, session
