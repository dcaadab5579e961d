"""Control configuration: the seven time scales (the source essay's scheduling and control
part, docs/sources.md) and the gains.

A configuration that exists is valid. Loops that are not separated in time
are refused with the numbers: the fast loop's period must be at least 10x
shorter than the slow loop's, and batch-size changes may come no faster than
the feedback time constant (observation lag plus one fast period: the time
before an admission decision can see its own effect).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

LOOP_SEPARATION = 10.0


class ControlConfigError(ValueError):
    """A control configuration that would make the loops fight: says which and by how much."""


@dataclass(frozen=True)
class TimeScales:
    """The essay's seven scales, as the seconds this run uses for each."""

    chip_s: float = 1e-6  # 0.1-10 us: on-chip work and links (autonomous)
    layer_s: float = 2e-4  # 50 us-1 ms: one layer (autonomous)
    token_s: float = 0.02  # 1-50 ms: one generated token (orchestrator: decode steps)
    admission_s: float = 1.0  # 0.1-10 s: buffering and admission (the fast loop)
    reconfiguration_s: float = 60.0  # seconds-minutes: moving workers (the slow loop)
    kv_lifetime_s: float = 3600.0  # minutes-days: how long a session's blobs are kept
    capacity_planning_s: float = 86400.0  # hours-days: buying hardware (outside a run)


@dataclass(frozen=True)
class ControlConfig:
    scales: TimeScales = TimeScales()
    observation_lag_s: float = 2.0  # as a Prometheus scrape interval would delay it
    # Buffered admission.
    backlog_ewma_s: float = 5.0  # smoothing time constant of the backlog
    backlog_gain: float = 0.5  # share of the backlog error corrected per smoothing time
    ready_buffer_s: float = 8.0  # seconds of decode service kept filled ahead
    interactive_reserve: float = 0.2  # share of admissions held for interactive calls
    batch_change_interval_s: float = 10.0  # minimum time between decode batch changes
    # Retire admission: decode counted as starving below this occupancy.
    retire_starvation_occupancy: float = 0.5
    # Predictive admission: refuse calls predicted to miss TTFT by this factor.
    ttft_target_s: float = 10.0
    tpot_target_s: float = 0.1
    reject_factor: float = 3.0
    # Slow loop.
    realloc_enabled: bool = True
    realloc_ewma_s: float = 120.0
    realloc_threshold: float = 0.35  # dead band half-width of the demand imbalance
    realloc_dwell_s: float = 300.0  # minimum time between two reconfigurations
    hysteresis: bool = True

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("scales", "realloc_enabled", "hysteresis"):
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
                    value) or value < 0:
                raise ControlConfigError(f"{f.name}: expected a finite number >= 0, got {value!r}")
        for f in fields(TimeScales):
            value = getattr(self.scales, f.name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ControlConfigError(f"scales.{f.name}: expected > 0, got {value!r}")
        fast, slow = self.scales.admission_s, self.scales.reconfiguration_s
        if fast * LOOP_SEPARATION > slow:
            raise ControlConfigError(
                f"the fast loop ({fast:g} s) must be at least {LOOP_SEPARATION:g}x shorter than "
                f"the slow loop ({slow:g} s): it is only {slow / fast:.2g}x shorter")
        if self.batch_change_interval_s < self.feedback_time_constant_s:
            raise ControlConfigError(
                f"batch changes every {self.batch_change_interval_s:g} s outpace the feedback "
                f"time constant of {self.feedback_time_constant_s:g} s (observation lag "
                f"{self.observation_lag_s:g} s + fast period {fast:g} s)")
        for name in ("interactive_reserve", "retire_starvation_occupancy", "realloc_threshold"):
            if getattr(self, name) > 1:
                raise ControlConfigError(f"{name}: expected <= 1, got {getattr(self, name)}")

    @property
    def fast_period_s(self) -> float:
        return self.scales.admission_s

    @property
    def slow_period_s(self) -> float:
        return self.scales.reconfiguration_s

    @property
    def feedback_time_constant_s(self) -> float:
        return self.observation_lag_s + self.scales.admission_s
