"""Time series sampled every fast-loop period: what the report plots and the summary reads."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workers.request import LatencyPart, Request

QUANTILES = (50, 90, 99)


@dataclass
class Series:
    time_s: list[float] = field(default_factory=list)
    decode_occupancy: list[float] = field(default_factory=list)  # running / slots, true value
    decode_running: list[int] = field(default_factory=list)
    decode_slots: list[int] = field(default_factory=list)
    backlog: list[int] = field(default_factory=list)  # admitted, not yet decoding
    ready_depth: list[int] = field(default_factory=list)
    admission_queue: list[int] = field(default_factory=list)
    upstream_waiting: list[int] = field(default_factory=list)  # admission queue + ready
    admitted: list[int] = field(default_factory=list)  # in the period just ended
    completed: list[int] = field(default_factory=list)
    ttft_mean_s: list[float] = field(default_factory=list)  # calls whose first token came
    reason: list[str] = field(default_factory=list)
    in_flight: list[int] = field(default_factory=list)
    submitted_total: list[int] = field(default_factory=list)
    completed_total: list[int] = field(default_factory=list)
    rejected_total: list[int] = field(default_factory=list)
    workers_by_pool: list[dict[str, int]] = field(default_factory=list)
    # Per period, over the calls completed in it: "<part>_<p50|p90|p99>_s" -> values (NaN
    # when none completed), parts as in the summary's latency_breakdown_s.
    latency_breakdown_s: dict[str, list[float]] = field(default_factory=dict)

    def add_breakdown(self, done: list[Request]) -> None:
        """One period's latency parts over the calls `done` in it."""
        for part in LatencyPart:
            values = np.array([r.parts_s[part] for r in done], dtype=np.float64)
            for q in QUANTILES:
                col = self.latency_breakdown_s.setdefault(f"{part.key}_p{q}_s", [])
                col.append(float(np.percentile(values, q)) if len(values) else float("nan"))

    def array(self, name: str) -> np.ndarray:
        if name in self.latency_breakdown_s:
            return np.asarray(self.latency_breakdown_s[name], dtype=np.float64)
        return np.asarray(getattr(self, name), dtype=np.float64)

    def __len__(self) -> int:
        return len(self.time_s)
