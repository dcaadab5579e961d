"""`trace stats`: counts and percentiles of a stream of sessions.

Each figure is defined in `docs/trace-stats.md`. Values are gathered into
compact arrays (8 bytes per call per figure), not by keeping sessions.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from traces._blocks import common_prefix_len
from traces.model import Session

PERCENTILES = (50, 90, 99)
DISTRIBUTIONS = (
    "input_tokens",
    "cached_tokens",
    "new_tokens",
    "output_tokens",
    "think_s",
    "calls_per_session",
    "session_duration_s",
    "prefix_hit",
)


@dataclass(frozen=True)
class Distribution:
    count: int
    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: array) -> Distribution:
        if not values:
            return cls(0, float("nan"), float("nan"), float("nan"), float("nan"))
        arr = np.frombuffer(values, dtype=np.float64)
        p50, p90, p99 = np.percentile(arr, PERCENTILES)
        return cls(len(arr), float(arr.mean()), float(p50), float(p90), float(p99))

    def as_dict(self) -> dict[str, float | int | None]:
        def clean(x: float) -> float | None:
            return None if x != x else round(x, 6)  # NaN (no values) is JSON null

        return {
            "count": self.count,
            "mean": clean(self.mean),
            "p50": clean(self.p50),
            "p90": clean(self.p90),
            "p99": clean(self.p99),
        }


@dataclass(frozen=True)
class TraceStats:
    sessions: int
    calls: int
    subagent_calls: int
    resets: int
    total_input_tokens: int
    total_output_tokens: int
    distributions: dict[str, Distribution]

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "sessions": self.sessions,
            "calls": self.calls,
            "subagent_calls": self.subagent_calls,
            "resets": self.resets,
            "total_input_tokens": self.total_input_tokens,
            "total_output_tokens": self.total_output_tokens,
        }
        out.update({name: d.as_dict() for name, d in self.distributions.items()})
        return out


def session_duration_s(session: Session) -> float:
    """Open loop: first to last arrival. Closed loop: think gaps plus recorded answer times."""
    calls = session.calls
    if calls[0].arrival_s is not None:
        return calls[-1].arrival_s - calls[0].arrival_s
    return sum(c.think_s + (c.service_s or 0.0) for c in calls)


def compute_stats(sessions: Iterable[Session]) -> TraceStats:
    values = {name: array("d") for name in DISTRIBUTIONS}
    n_sessions = n_calls = n_sub = n_resets = total_in = total_out = 0
    for session in sessions:
        n_sessions += 1
        values["calls_per_session"].append(len(session.calls))
        values["session_duration_s"].append(session_duration_s(session))
        last_ids: dict[str, tuple[int, ...]] = {}
        for call in session.calls:
            n_calls += 1
            n_sub += call.is_subagent
            n_resets += call.reset_before
            total_in += call.input_tokens
            total_out += call.output_tokens
            values["input_tokens"].append(call.input_tokens)
            values["cached_tokens"].append(call.cached_tokens)
            values["new_tokens"].append(call.new_tokens)
            values["output_tokens"].append(call.output_tokens)
            if call.index > 0:
                values["think_s"].append(call.think_s)
            prev = last_ids.get(call.agent_id)
            if prev is not None and call.input_tokens > 0:
                shared = common_prefix_len(call.block_ids, prev) * call.block_size
                values["prefix_hit"].append(shared / call.input_tokens)
            last_ids[call.agent_id] = call.block_ids
    return TraceStats(
        sessions=n_sessions,
        calls=n_calls,
        subagent_calls=n_sub,
        resets=n_resets,
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        distributions={name: Distribution.of(v) for name, v in values.items()},
    )
