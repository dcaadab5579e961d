"""Time series sampled every fast-loop period: what the report plots and the summary reads."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


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

    def array(self, name: str) -> np.ndarray:
        return np.asarray(getattr(self, name), dtype=np.float64)

    def __len__(self) -> int:
        return len(self.time_s)
