"""What controllers see: observations of the cluster, delivered late as scraped metrics are.

An `Observation` is a frozen snapshot. Counters (`admitted_total`,
`retired_total`, ...) are cumulative, as Prometheus counters are, so a
controller computes its own rates. `ObservationLag` hands a controller the
snapshot taken `lag_s` ago: feedback delay is what makes admission on decode
retirements ring.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, fields, replace
from operator import attrgetter


@dataclass(frozen=True)
class PoolObservation:
    name: str
    phase: str  # prefill, midfill or decode
    workers: int  # serving (not draining or loading weights)
    queue_depth: int  # requests waiting at the pool's workers
    running: int  # requests in a batch
    slots: int  # decode: sequences the workers aim to run together; fills: 0
    busy_fraction: float  # share of the last period the workers spent in steps


@dataclass(frozen=True)
class Observation:
    time_s: float  # when the snapshot was taken
    admission_queue: int  # calls waiting for admission
    admission_queue_interactive: int
    fill_queue: int  # admitted, waiting at a fill worker
    fill_running: int  # in a prefill or midfill batch
    ready_depth: int  # filled, waiting in the ready buffer for decode
    decode_loading: int  # a decode worker is loading their KV
    decode_running: int  # decoding
    decode_slots: int  # sum of the decode workers' target batches
    admitted_total: int
    retired_total: int  # decode completions
    completed_total: int  # all completions (fills that need no decode included)
    rejected_total: int
    predicted_decode_calls_per_s: float  # the cost core's decode service rate, in calls
    predicted_fill_latency_s: float  # the cost core's time for a typical fill
    pools: tuple[PoolObservation, ...] = ()

    @property
    def backlog(self) -> int:
        """Admitted work not yet decoding: the upstream buffer a controller steers."""
        return self.fill_queue + self.fill_running + self.ready_depth + self.decode_loading

    @property
    def decode_occupancy(self) -> float:
        return self.decode_running / self.decode_slots if self.decode_slots else 0.0

    def content(self) -> tuple:
        """Every field but the time: equal for two snapshots of an unchanged cluster."""
        return _CONTENT(self)


_CONTENT = attrgetter(*(f.name for f in fields(Observation) if f.name != "time_s"))


class ObservationLag:
    """Delivers, at time t, the newest snapshot taken at or before t - lag_s.

    `hold(period_s)` says the newest snapshot repeats every `period_s` until the next
    `record` (the shell skips sampling an idle cluster, whose snapshots would only differ
    in their time): in between, `seen_at` returns copies of it stamped with the sample
    times on that grid, as if they had been recorded.
    """

    def __init__(self, lag_s: float) -> None:
        if lag_s < 0:
            raise ValueError(f"observation lag must be >= 0 s, got {lag_s}")
        self.lag_s = lag_s
        self._pending: deque[Observation] = deque()
        self._current: Observation | None = None
        self._hold: tuple[Observation, int, int] | None = None  # obs, its ns, period ns
        self._synth: Observation | None = None

    def record(self, obs: Observation) -> None:
        self._pending.append(obs)

    def hold(self, period_s: float) -> None:
        held = self._pending[-1] if self._pending else self._current
        if held is not None:
            self._hold = (held, round(held.time_s * 1e9), round(period_s * 1e9))

    def seen_at(self, now_s: float) -> Observation | None:
        # A 1 ns tolerance absorbs float rounding of equal instants.
        horizon = now_s - self.lag_s + 1e-9
        while self._pending and self._pending[0].time_s <= horizon:
            self._current = self._pending.popleft()
        if self._hold is not None:
            held, start_ns, period_ns = self._hold
            if self._current is held:
                k = int((round(horizon * 1e9) - start_ns) // period_ns)
                if k >= 1:
                    time_s = (start_ns + k * period_ns) / 1e9
                    if self._synth is None or self._synth.time_s != time_s:
                        self._synth = replace(held, time_s=time_s)
                    return self._synth
            elif self._current is not None and self._current.time_s > held.time_s:
                self._hold = self._synth = None
        return self._current
