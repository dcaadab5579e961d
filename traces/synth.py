"""A seeded generator of agent sessions that look like the `weka-cc-dev` collection.

Each session is a main agent whose context grows turn by turn (each turn
resends everything before it and adds new tokens), falls in a staircase when
it reaches the session's compaction point (a context reset back to the
system-and-tools prefix plus a summary), now and then dips briefly (the
agent backs up a few turns), and occasionally runs a sub-agent inline.
Marginals (calls per session, first input, new tokens per turn, output,
think gaps, reset sizes, sub-agent shapes) are drawn from the collection's
quantile tables in `traces._calibration`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from traces._blocks import SessionBlocks
from traces._calibration import QUANTILE_LEVELS, TABLES
from traces.model import MAIN_AGENT, Call, Session

BLOCK_SIZE = 64
# System prompt plus tool definitions of the collection: 14.7k-16.3k tokens
# (p5-p95 of `tool_tokens + system_tokens`).
PREFIX_TOKENS = (14_700, 16_300)
SUBAGENT_PREFIX_TOKENS = (8_000, 9_000)
# 13 sub-agents over 6,708 top-level calls.
SUBAGENT_PER_CALL = 13 / 6_708
# Of the turns that keep most of their predecessor, ~1.2% keep < 98% of it.
DIP_PER_CALL = 0.012
# Automatic compaction: 30 of the collection's 40 resets come at 144k-165k
# tokens of input (a 200k-token window less the room kept for the answer).
COMPACTION_AT_TOKENS = (144_000, 165_000)
# The other 10 come earlier, at any size (a cleared conversation): 10 in 6,595 turns.
CLEAR_PER_CALL = 10 / 6_595
# Sessions that start beyond the compaction point run on a long-context
# model: compaction then comes later (the largest inputs stay under 900k).
LONG_CONTEXT_GROWTH = (1.05, 1.4)
LONG_CONTEXT_MAX_TOKENS = 900_000
WINDOW_TOKENS = 200_000
REDRAWS = 8

_LEVELS = np.asarray(QUANTILE_LEVELS)
_LOG_TABLES = {name: np.log1p(np.asarray(qs)) for name, qs in TABLES.items()}


def draw(name: str, rng: np.random.Generator) -> float:
    """One draw from a calibration table by inverse CDF, interpolated in log(1 + x)."""
    return float(math.expm1(np.interp(rng.random(), _LEVELS, _LOG_TABLES[name])))


def _draw_int(name: str, rng: np.random.Generator, low: int = 0) -> int:
    return max(low, round(draw(name, rng)))


class _Agent:
    """One conversation's context as full-block ids plus its token count."""

    def __init__(self, agent_id: str, next_id: Iterator[int]):
        self.agent_id = agent_id
        self.ids: list[int] = []
        self.tokens = 0
        self._next_id = next_id

    def resize(self, keep_blocks: int, tokens: int) -> None:
        """Keep the first `keep_blocks` blocks (all there are, when a dip left fewer);
        fill up to `tokens` with fresh content."""
        keep = min(keep_blocks, len(self.ids))
        del self.ids[keep:]
        self.ids.extend(next(self._next_id) for _ in range(tokens // BLOCK_SIZE - keep))
        self.tokens = tokens


class _Writer:
    """Collects the calls of one session, deriving cached tokens like the readers do."""

    def __init__(self, session_id: str, rng: np.random.Generator):
        self.session_id = session_id
        self.rng = rng
        self.blocks = SessionBlocks(namespace=0)
        self.calls: list[Call] = []

    def emit(self, agent: _Agent, think_s: float, reset: bool = False) -> None:
        cached_blocks, block_ids = self.blocks.add(agent.agent_id, tuple(agent.ids))
        cached = cached_blocks * BLOCK_SIZE
        self.calls.append(
            Call(
                session_id=self.session_id,
                index=len(self.calls),
                input_tokens=agent.tokens,
                cached_tokens=cached,
                new_tokens=agent.tokens - cached,
                output_tokens=_draw_int("output_tokens", self.rng),
                think_s=think_s if self.calls else 0.0,
                is_subagent=agent.agent_id != MAIN_AGENT,
                reset_before=reset,
                block_size=BLOCK_SIZE,
                block_ids=block_ids,
                agent_id=agent.agent_id,
            )
        )


def _grow(agent: _Agent, table: str, rng: np.random.Generator, window: float) -> bool:
    """A normal turn: everything before is resent, new tokens follow.

    Returns False when no draw of new tokens fits in the model's window.
    """
    keep = agent.tokens // BLOCK_SIZE
    for _ in range(REDRAWS):
        tokens = keep * BLOCK_SIZE + _draw_int(table, rng, low=1)
        if tokens <= window:
            agent.resize(keep, tokens)
            return True
    return False


def _subagent(out: _Writer, n: int, next_id: Iterator[int], rng: np.random.Generator) -> None:
    agent = _Agent(f"agent_{n:03d}", next_id)
    prefix = int(rng.integers(*SUBAGENT_PREFIX_TOKENS))
    first = max(prefix + 1, _draw_int("subagent_first_input_tokens", rng))
    agent.resize(0, first)
    out.emit(agent, think_s=0.0)
    for _ in range(_draw_int("subagent_calls", rng, low=1) - 1):
        if not _grow(agent, "subagent_turn_new_tokens", rng, WINDOW_TOKENS):
            return
        out.emit(agent, think_s=draw("think_s", rng))


def _session(session_id: str, next_id: Iterator[int], rng: np.random.Generator) -> Session:
    out = _Writer(session_id, rng)
    main = _Agent(MAIN_AGENT, next_id)
    prefix = int(rng.integers(*PREFIX_TOKENS))
    main.resize(0, max(prefix + 1, _draw_int("first_input_tokens", rng)))
    limit = float(rng.uniform(*COMPACTION_AT_TOKENS))
    window = float(WINDOW_TOKENS)
    if main.tokens >= limit:
        limit = min(LONG_CONTEXT_MAX_TOKENS, main.tokens * rng.uniform(*LONG_CONTEXT_GROWTH))
        window = max(limit, main.tokens) * 1.1
    out.emit(main, think_s=0.0)
    n_subagents = 0
    for _ in range(_draw_int("main_calls", rng, low=1) - 1):
        if rng.random() < SUBAGENT_PER_CALL:
            n_subagents += 1
            _subagent(out, n_subagents, next_id, rng)
        think_s = draw("think_s", rng)
        if rng.random() < DIP_PER_CALL:
            # A brief dip: the agent backs up and resends only part of its context, never
            # less than the system-and-tools prefix (resent with every call).
            keep = max(prefix // BLOCK_SIZE,
                       int(main.tokens * rng.uniform(0.75, 0.98)) // BLOCK_SIZE)
            main.resize(keep, keep * BLOCK_SIZE + _draw_int("turn_new_tokens", rng, low=1))
        elif (
            main.tokens >= limit
            or rng.random() < CLEAR_PER_CALL
            or not _grow(main, "turn_new_tokens", rng, window)
        ):
            # Compaction: back to the prefix plus a summary; cut again at the same point.
            summary = max(prefix + 1, _draw_int("reset_input_tokens", rng))
            main.resize(prefix // BLOCK_SIZE, summary)
            out.emit(main, think_s, reset=True)
            continue
        out.emit(main, think_s)
    return Session(session_id, "synth", None, tuple(out.calls))


def generate(n_sessions: int, rng: np.random.Generator) -> Iterator[Session]:
    """`n_sessions` closed-loop agent sessions, streamed; the same rng state gives the same trace."""
    if isinstance(n_sessions, bool) or not isinstance(n_sessions, int) or n_sessions <= 0:
        raise ValueError(f"n_sessions: expected an integer > 0, got {n_sessions!r}")
    counter = iter(range(1, 1 << 40))  # block ids, unique across the generated trace
    width = len(str(n_sessions))
    for i in range(n_sessions):
        yield _session(f"synth-{i:0{width}d}", counter, rng)
