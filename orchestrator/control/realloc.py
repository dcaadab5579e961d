"""The slow loop: move workers between fill and decode pools on smoothed demand.

Pure: `decide(observation, now_s) -> ReallocDecision`. The demand imbalance
is decode's pressure minus the fill pools' pressure, each roughly 0..1 (over 1
when work queues), smoothed by an EWMA over `realloc_ewma_s`. With
hysteresis, a worker moves only when the smoothed imbalance leaves the dead
band [-threshold, +threshold], never within `dwell_s` of the last move, and
never when, by the observation it acts on, the move would leave the pool that
gives the worker more pressed than the pool that takes it (a move that only
shifts the bottleneck). Without hysteresis (for tests that show flapping) the
threshold is zero and there is neither dwell nor that check. Of the pools on
the giving side, the one the move leaves least pressed gives the worker; of
those on the taking side, the most pressed takes it (`pressure_after`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from numbers import Real
from typing import Protocol, runtime_checkable

from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation, PoolObservation
from orchestrator.control.policies.base import DecisionError


class ReallocReason(Enum):
    NO_OBSERVATION = "no_observation"
    DEAD_BAND = "dead_band"  # imbalance inside the band: leave the pools alone
    DWELL = "dwell"  # too soon after the last move
    NO_DONOR = "no_donor"  # the pool that should give a worker has only one
    WOULD_BIND = "would_bind"  # the giving pool would be left more pressed than the taker
    TO_DECODE = "to_decode"
    TO_FILL = "to_fill"


@dataclass(frozen=True)
class Move:
    from_pool: str
    to_pool: str

    def __post_init__(self) -> None:
        for name in ("from_pool", "to_pool"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise DecisionError(f"move.{name}: expected a pool's name, got {value!r}")
        if self.from_pool == self.to_pool:
            raise DecisionError(f"move: from_pool and to_pool are both {self.to_pool!r}")


@dataclass(frozen=True)
class ReallocDecision:
    move: Move | None
    reason: ReallocReason
    imbalance: float  # the smoothed signal the decision was made on

    def __post_init__(self) -> None:
        # Checked where it is made, as an AdmissionDecision is (policies.base).
        if self.move is not None and not isinstance(self.move, Move):
            raise DecisionError(f"move: expected a Move or None, got {self.move!r}")
        if not isinstance(self.reason, ReallocReason):
            raise DecisionError(f"reason: expected a ReallocReason, got {self.reason!r}")
        imbalance = self.imbalance
        if isinstance(imbalance, bool) or not isinstance(imbalance, Real) or math.isnan(imbalance):
            raise DecisionError(f"imbalance: expected a number, got {imbalance!r}")


@runtime_checkable
class ReallocationPolicy(Protocol):
    """The slow loop's interface: `decide(observation, now_s) -> ReallocDecision`, called
    once per slow-loop period with the lagged observation; a `Move` names the pool that
    gives a worker and the pool that takes it (the shell drains it and loads weights)."""

    name: str

    def decide(self, obs: Observation | None, now_s: float) -> ReallocDecision: ...


def demand_imbalance(obs: Observation) -> float:
    """Decode pressure minus fill pressure. Decode: occupancy plus what waits for it,
    per slot. Fills: busy share plus queued calls per worker (a queue of one batch per
    worker counts as fully loaded)."""
    decode = (obs.decode_running + obs.decode_loading + obs.ready_depth) / max(
        obs.decode_slots, 1)
    fills = [p for p in obs.pools if p.phase != "decode"]
    workers = sum(p.workers for p in fills) or 1
    busy = sum(p.busy_fraction * p.workers for p in fills) / workers
    fill = busy + (obs.fill_queue / workers) / 4.0
    return min(decode, 2.0) - min(fill, 2.0)


def pressure_after(obs: Observation, pool: PoolObservation, change: int) -> float:
    """A pool's pressure as `demand_imbalance` reads it, the work observed at it spread
    over its workers after `change` (+1 takes one, -1 gives one): decode, what it runs
    and what waits for it per slot; a fill pool, its busy share plus its queued calls
    per worker over 4. The busy share is one period's, and a step's time counts in the
    period it starts: a pool in the middle of long steps reads 0. So a fill pool is at
    least as busy as its calls in fill say, a worker each (seed 2 at 32 slots, 4x in
    docs/control.md: read idle with 3-6 calls in fill, the midfill pool gave a worker
    and queued 55-87 calls)."""
    if pool.phase == "decode":
        workers = sum(p.workers for p in obs.pools if p.phase == "decode")
        slots = obs.decode_slots / max(workers, 1) * (workers + change)
        waiting = obs.decode_running + obs.decode_loading + obs.ready_depth
        return waiting / slots if slots > 0 else math.inf
    workers = pool.workers + change
    if workers <= 0:
        return math.inf
    busy = max(pool.busy_fraction, min(pool.running, pool.workers) / max(pool.workers, 1))
    return (busy * pool.workers + pool.queue_depth / 4.0) / workers


class Reallocator:
    """The built-in slow loop (registered as `hysteresis`)."""

    def __init__(self, config: ControlConfig) -> None:
        self.name = "hysteresis" if config.hysteresis else "no-hysteresis"
        self.hysteresis = config.hysteresis
        self.threshold = config.realloc_threshold if config.hysteresis else 0.0
        self.dwell_s = config.realloc_dwell_s if config.hysteresis else 0.0
        self.ewma_s = config.realloc_ewma_s
        self._smoothed: float | None = None
        self._last_time_s: float | None = None
        self._last_move_s = -math.inf

    def smooth(self, sample: float, time_s: float) -> float:
        if self._smoothed is None or self._last_time_s is None:
            self._smoothed = sample
        else:
            dt = max(time_s - self._last_time_s, 0.0)
            alpha = 1.0 - math.exp(-dt / self.ewma_s) if self.ewma_s > 0 else 1.0
            self._smoothed += alpha * (sample - self._smoothed)
        self._last_time_s = time_s
        return self._smoothed

    def decide_on(self, imbalance: float, now_s: float, pools: dict[str, tuple[str, int]],
                  pressure: Callable[[str, int], float] | None = None) -> ReallocDecision:
        """Decide on an already smoothed imbalance. `pools` maps name -> (phase, workers);
        `pressure(name, change)`: a pool's pressure once it has given (-1) or taken (+1)
        a worker, or as it is (0), read from the observation (None: not known; the
        donor is then the pool with the most workers, the taker the first by name)."""
        if -self.threshold <= imbalance <= self.threshold:
            return ReallocDecision(None, ReallocReason.DEAD_BAND, imbalance)
        if now_s - self._last_move_s < self.dwell_s:
            return ReallocDecision(None, ReallocReason.DWELL, imbalance)
        to_decode = imbalance > 0
        # Donors by preference without pressures: the most workers, ties by name, last first.
        donors = [n for _, n in sorted(((w, n) for n, (ph, w) in pools.items()
                                        if (ph != "decode") == to_decode and w > 1),
                                       reverse=True)]
        takers = sorted(n for n, (ph, _) in pools.items() if (ph == "decode") == to_decode)
        if not donors or not takers:
            return ReallocDecision(None, ReallocReason.NO_DONOR, imbalance)
        if pressure is None:
            donor, taker = donors[0], takers[0]
        else:
            # The donor left least pressed, the taker most pressed (ties: the order above).
            donor = min(donors, key=lambda n: pressure(n, -1))
            taker = min(takers, key=lambda n: -pressure(n, 0))
            if self.hysteresis and pressure(taker, +1) < pressure(donor, -1):
                return ReallocDecision(None, ReallocReason.WOULD_BIND, imbalance)
        self._last_move_s = now_s
        reason = ReallocReason.TO_DECODE if to_decode else ReallocReason.TO_FILL
        return ReallocDecision(Move(donor, taker), reason, imbalance)

    def decide(self, obs: Observation | None, now_s: float) -> ReallocDecision:
        if obs is None:
            return ReallocDecision(None, ReallocReason.NO_OBSERVATION, 0.0)
        smoothed = self.smooth(demand_imbalance(obs), obs.time_s)
        by_name = {p.name: p for p in obs.pools}
        return self.decide_on(smoothed, now_s,
                              {n: (p.phase, p.workers) for n, p in by_name.items()},
                              lambda name, change: pressure_after(obs, by_name[name], change))
