"""`binding`: `buffered`, admitting on whichever resource binds: decode, a fill pool or a link.

`buffered` steers the calls admitted and not yet decoding against a target made of
decode's service rate; where a fill pool binds instead (the midfill pool at every point
measured, on the rack-scale preset and on its 32-slot variant: docs/control.md), that
target is far above what the pool clears, calls queue at its workers, routed before
their prefix's worker is free, and the decode loop never closes.
`binding` keeps `buffered`'s decode loop and adds, per fill pool, the same law on what
binds there, admitting each period at the lowest of their rates:

- decode: `buffered`'s, unchanged (the predicted decode rate corrected in proportion to
  the smoothed backlog's error);
- each fill pool (`PoolObservation.backlog_tokens`, `tokens_total`, `busy_s_total`), while
  its workers are busy at least FILL_SATURATED of the time: its measured rate in tokens
  (tokens computed over busy seconds, counters, over about a minute, times its serving
  workers), corrected in proportion to the error of its smoothed backlog against
  `ready_buffer_s` seconds of that rate plus two typical calls a worker, and counted in
  admitted calls by the tokens that reached the pool per call admitted (its tokens
  computed plus its backlog's growth, over the admissions counter: what share of the
  calls go there and how big they are, as measured). Not the predictor's rate: its fill
  time is a latency (fills that share steps take longer each than their share of the
  workers). A pool busy less than that is not where calls wait: a backlog behind one
  worker (calls go to their prefix's worker) while others idle is not relieved by
  holding calls back.

and, when the busiest KV link carried at least `LINK_TARGET` of its bandwidth between
the last two samples at which its byte counters moved (`kv_link_utilisation`), no more than its own recent admission rate scaled
down to that target. Every fact is in the observation, as late as the rest (no oracle).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation, PoolObservation
from orchestrator.control.policies.base import (
    FILL_BACKLOG,
    KV_LINKS,
    AdmissionDecision,
    AdmissionReason,
)
from orchestrator.control.policies.buffered import BufferedAdmission
from orchestrator.control.stability import LoopModel

# A link carrying this share of its bandwidth over a period is taken as binding: copies
# beyond it only queue on the link (max-min fair sharing slows every flow on it).
LINK_TARGET = 0.9
# A fill pool's rate and tokens per admitted call are summed over about a minute of
# scrapes; its busy share over FILL_BUSY_EWMA_S. It binds from FILL_SATURATED busy.
FILL_RATE_EWMA_S = 60.0
FILL_BUSY_EWMA_S = 10.0
FILL_SATURATED = 0.9
FILL_CALLS_PER_WORKER = 2.0  # typical calls at each worker besides the seconds of work
MIN_BUSY_S = 5.0  # busy seconds (decayed) before a rate is read
MIN_ADMITTED = 5.0  # admissions (decayed) before tokens per admitted call are read


@dataclass
class PoolLoop:
    """What `binding` has learnt of one fill pool from its observations."""

    last: PoolObservation
    last_admitted: int
    last_s: float
    done: float = 0.0  # tokens computed, decayed sum
    busy_s: float = 0.0  # busy seconds, decayed sum
    arrived: float = 0.0  # tokens reaching the pool, decayed sum
    admitted: float = 0.0  # calls admitted, decayed sum
    busy_share: float = 0.0  # its workers' busy share, smoothed
    backlog: float | None = None  # its backlog in tokens, smoothed (buffered's constant)

    def learn(self, pool: PoolObservation, admitted_total: int, time_s: float,
              ewma_s: float) -> None:
        """Bring the sums and the smoothed figures to this observation."""
        last, dt = self.last, time_s - self.last_s
        done = pool.tokens_total - last.tokens_total
        busy_s = pool.busy_s_total - last.busy_s_total
        admitted = admitted_total - self.last_admitted
        self.last, self.last_admitted, self.last_s = pool, admitted_total, time_s
        if self.backlog is None:
            self.backlog = float(pool.backlog_tokens)
        if dt <= 0:
            return
        self.backlog += (1.0 - math.exp(-dt / ewma_s)) * (pool.backlog_tokens - self.backlog)
        if done < 0 or busy_s < 0 or pool.workers != last.workers:
            return  # a worker came or went, its counters with it: no reading
        keep = math.exp(-dt / FILL_RATE_EWMA_S)
        self.done = keep * self.done + done
        self.busy_s = keep * self.busy_s + busy_s
        self.arrived = keep * self.arrived + done + pool.backlog_tokens - last.backlog_tokens
        self.admitted = keep * self.admitted + admitted
        if pool.workers:
            # Not clipped per reading: a step's seconds count when it starts (a long step
            # reads as several seconds of one period), so only the smoothed share is whole.
            share = busy_s / (dt * pool.workers)
            self.busy_share += (1.0 - math.exp(-dt / FILL_BUSY_EWMA_S)) * (
                share - self.busy_share)

    def tokens_per_s(self) -> float | None:
        """The pool's tokens a second with every serving worker busy; None until read."""
        if self.busy_s < MIN_BUSY_S:
            return None
        return self.done / self.busy_s * self.last.workers

    def tokens_per_admitted(self) -> float | None:
        """Tokens reaching the pool per call admitted; None until read (or none came)."""
        if self.admitted < MIN_ADMITTED or self.arrived <= 0:
            return None
        return self.arrived / self.admitted


class BindingAdmission(BufferedAdmission):
    name = "binding"
    observes = frozenset({FILL_BACKLOG, KV_LINKS})  # the walks the shell makes for it

    def __init__(self, config: ControlConfig, base_target_batch: int = 4,
                 max_target_batch: int | None = None) -> None:
        super().__init__(config, base_target_batch, max_target_batch)
        self.pools: dict[str, PoolLoop] = {}  # fill pools by name
        self._admit_rate = 0.0  # its own admissions a second, smoothed as the backlogs

    def target_fill_tokens(self, rate: float, per_call: float, workers: int) -> float:
        """`ready_buffer_s` seconds of a pool's work, and besides a typical call queued
        behind the one each of its workers runs (calls are lumpy, ~100k tokens a cold one,
        and go to their prefix's worker: seconds of work in all may leave a worker idle)."""
        return rate * self.config.ready_buffer_s + FILL_CALLS_PER_WORKER * workers * per_call

    def fill_rate(self, obs: Observation) -> float:
        """Calls a second the fill loops admit: the lowest over the saturated fill pools of
        the pool's rate corrected by its smoothed backlog's error over the smoothing time
        (never below zero), over its tokens per admitted call; inf when none binds."""
        cfg, lowest = self.config, math.inf
        for pool in obs.pools:
            if pool.phase == "decode":
                continue
            loop = self.pools.get(pool.name)
            if loop is None:
                self.pools[pool.name] = PoolLoop(pool, obs.admitted_total, obs.time_s)
                continue
            loop.learn(pool, obs.admitted_total, obs.time_s, cfg.backlog_ewma_s)
            rate, per_admitted = loop.tokens_per_s(), loop.tokens_per_admitted()
            if rate is None or per_admitted is None or loop.busy_share < FILL_SATURATED:
                continue
            target = self.target_fill_tokens(rate, obs.predicted_fill_tokens_per_call,
                                             pool.workers)
            tokens = max(0.0, rate + cfg.backlog_gain * (target - loop.backlog)
                         / cfg.backlog_ewma_s)
            lowest = min(lowest, tokens / per_admitted)
        return lowest

    def link_rate(self, obs: Observation) -> float:
        """Where the busiest KV link ran at `LINK_TARGET` or more (`kv_link_utilisation`):
        its recent admission rate scaled by target / utilisation; else inf (no bound)."""
        u = obs.kv_link_utilisation
        return self._admit_rate * LINK_TARGET / u if u >= LINK_TARGET else math.inf

    def decide(self, obs: Observation | None, now_s: float) -> AdmissionDecision:
        if obs is None:
            return AdmissionDecision(0, AdmissionReason.NO_OBSERVATION)
        target = self.target_backlog(obs)
        error = target - self._smooth(obs.time_s, obs.backlog)
        decode_step = self._credit_step(obs, error)
        fill_step = self.fill_rate(obs) * self.period_s
        link_step = self.link_rate(obs) * self.period_s
        step = min(decode_step, fill_step, link_step)
        admit = self._admit(step, max(target, 1.0))
        decay = 1.0 - math.exp(-self.period_s / self.config.backlog_ewma_s)
        self._admit_rate += decay * (admit / self.period_s - self._admit_rate)
        decision = self._decision(admit, error, target, self._batch_target(obs, now_s))
        if step < decode_step:
            reason = (AdmissionReason.KV_LINK if link_step < fill_step
                      else AdmissionReason.FILL_BACKLOG)
            return AdmissionDecision(admit=decision.admit, reason=reason,
                                     decode_target_batch=decision.decode_target_batch,
                                     background_limit=decision.background_limit)
        return decision

    def skip_idle(self, obs: Observation, first_s: float, ticks: int) -> None:
        """None: the shell ticks `decide` over an idle span (the pools' smoothed figures
        and the admission rate move too; buffered's closed form follows its backlog only)."""
        return None

    def loop_model(self, config: ControlConfig) -> LoopModel:
        """`buffered`'s: each of its loops (decode's, each fill pool's) is that proportional
        law on a smoothed backlog seen `lag` late, L(s) = g / (tau s (1 + tau s))
        e^{-lag s}, and the one with the lowest rate closes (the link bound only lowers
        the gain)."""
        return super().loop_model(config)
