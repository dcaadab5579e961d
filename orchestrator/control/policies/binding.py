"""`binding`: `buffered`, admitting on whichever resource binds: decode, a fill pool or a link.

`buffered` steers the calls admitted and not yet decoding against a target made of
decode's service rate; where a fill pool binds instead (the prefill worker on the
rack-scale preset since the fill split fix of 7dcbb5f: docs/control.md), that target is
far above what the pool clears, calls queue at its workers, routed before their
prefix's worker is free, and the decode loop never closes.
`binding` keeps `buffered`'s decode loop for every call and adds, per fill pool, the same
law on what binds there, applied to the calls the router would send to that pool only
(`AdmissionDecision.pool_limits`, `queue_pools`: the shell passes over a capped pool's
calls, so a call for a pool with room does not wait behind them):

- decode: `buffered`'s, unchanged (the predicted decode rate corrected in proportion to
  the smoothed backlog's error), over all calls;
- each fill pool (`PoolObservation.backlog_tokens`, `tokens_total`, `busy_s_total`), while
  its workers are busy at least FILL_SATURATED of the time: its measured rate in tokens
  (tokens computed over busy seconds, counters, over about a minute, times its serving
  workers), corrected in proportion to the error of its smoothed backlog against
  `ready_buffer_s` seconds of that rate plus two typical calls a worker, and counted in
  the pool's own calls by the tokens a call brings it (its backlog over the calls queued
  and running at its workers, smoothed, as measured). Not the predictor's rate: its
  fill time is a latency (fills that share steps take longer each than their share of
  the workers). A pool busy less than that is not where calls wait: a backlog behind one
  worker (calls go to their prefix's worker) while others idle is not relieved by
  holding calls back.

and, when the busiest KV link carried at least `LINK_TARGET` of its bandwidth between
the last two samples at which its byte counters moved (`kv_link_utilisation`), no more
than its own recent admission rate scaled down to that target, over all calls. Every
fact is in the observation, as late as the rest (no oracle).

Up to 6786044 (38d0c38 changed it) the fill loop held every call to the binding pool's
rate (one admission rate for all): on the preset at x0.02, 2x, where the prefill worker
binds, that held the midfill pool's calls with it (busy 0.32 against `local`'s 0.82),
-16.6% goodput and +31.5% p99 TTFT on `local` (docs/control.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation, PoolObservation
from orchestrator.control.policies.base import (
    FILL_BACKLOG,
    KV_LINKS,
    QUEUE_POOLS,
    AdmissionDecision,
    AdmissionReason,
)
from orchestrator.control.policies.buffered import BufferedAdmission
from orchestrator.control.stability import LoopModel

# A link carrying this share of its bandwidth over a period is taken as binding: copies
# beyond it only queue on the link (max-min fair sharing slows every flow on it).
LINK_TARGET = 0.9
# A fill pool's rate is summed over about a minute of scrapes; its busy share smoothed
# over FILL_BUSY_EWMA_S. It binds from FILL_SATURATED busy.
FILL_RATE_EWMA_S = 60.0
FILL_BUSY_EWMA_S = 10.0
FILL_SATURATED = 0.9
FILL_CALLS_PER_WORKER = 2.0  # typical calls at each worker besides the seconds of work
MIN_BUSY_S = 5.0  # busy seconds (decayed) before a rate is read


@dataclass
class PoolLoop:
    """What `binding` has learnt of one fill pool from its observations."""

    last: PoolObservation
    last_s: float
    done: float = 0.0  # tokens computed, decayed sum
    busy_s: float = 0.0  # busy seconds, decayed sum
    busy_share: float = 0.0  # its workers' busy share, smoothed
    backlog: float | None = None  # its backlog in tokens, smoothed (buffered's constant)
    per_call: float | None = None  # tokens to compute per call at its workers, smoothed

    def learn(self, pool: PoolObservation, time_s: float, ewma_s: float) -> None:
        """Bring the sums and the smoothed figures to this observation."""
        last, dt = self.last, time_s - self.last_s
        done = pool.tokens_total - last.tokens_total
        busy_s = pool.busy_s_total - last.busy_s_total
        self.last, self.last_s = pool, time_s
        if self.backlog is None:
            self.backlog = float(pool.backlog_tokens)
        if dt <= 0:
            return
        alpha = 1.0 - math.exp(-dt / ewma_s)
        self.backlog += alpha * (pool.backlog_tokens - self.backlog)
        calls = pool.queue_depth + pool.running
        if calls and pool.backlog_tokens > 0:
            # A running call's tokens left count as a call's: a low reading, which the
            # backlog's correction absorbs (more calls admitted, the backlog grows).
            per_call = pool.backlog_tokens / calls
            self.per_call = per_call if self.per_call is None else (
                self.per_call + alpha * (per_call - self.per_call))
        if done < 0 or busy_s < 0 or pool.workers != last.workers:
            return  # a worker came or went, its counters with it: no reading
        keep = math.exp(-dt / FILL_RATE_EWMA_S)
        self.done = keep * self.done + done
        self.busy_s = keep * self.busy_s + busy_s
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

    def binds(self) -> bool:
        """Busy enough, and read: its calls are held to its own loop."""
        return (self.busy_share >= FILL_SATURATED and self.tokens_per_s() is not None
                and self.per_call is not None)


class BindingAdmission(BufferedAdmission):
    name = "binding"
    # The walks the shell makes for it, and each queued call's fill pool (`pool_limits`).
    observes = frozenset({FILL_BACKLOG, KV_LINKS, QUEUE_POOLS})

    def __init__(self, config: ControlConfig, base_target_batch: int = 4,
                 max_target_batch: int | None = None) -> None:
        super().__init__(config, base_target_batch, max_target_batch)
        self.pools: dict[str, PoolLoop] = {}  # fill pools by name
        self._admit_rate = 0.0  # its own admissions a second, smoothed as the backlogs
        self._fill_credit: dict[str, float] = {}  # fractional admissions per fill phase

    def target_fill_tokens(self, rate: float, per_call: float, workers: int) -> float:
        """`ready_buffer_s` seconds of a pool's work, and besides a typical call queued
        behind the one each of its workers runs (calls are lumpy, ~100k tokens a cold one,
        and go to their prefix's worker: seconds of work in all may leave a worker idle)."""
        return rate * self.config.ready_buffer_s + FILL_CALLS_PER_WORKER * workers * per_call

    def fill_limits(self, obs: Observation) -> dict[str, int] | None:
        """Learn from `obs`; per fill phase whose pools bind, the calls of this period's
        admissions the router may send there, or None when none binds. Each binding pool
        earns its rate corrected by its smoothed backlog's error over the smoothing time
        (never below zero), over its tokens per call; a phase's credit earns its pools'
        sum (held at most the calls their targets hold, at least one), and its whole
        part is the cap."""
        cfg, earned = self.config, {}
        for pool in obs.pools:
            if pool.phase == "decode":
                continue
            loop = self.pools.get(pool.name)
            if loop is None:
                self.pools[pool.name] = PoolLoop(pool, obs.time_s)
                continue
            loop.learn(pool, obs.time_s, cfg.backlog_ewma_s)
            if not loop.binds():
                continue
            rate = loop.tokens_per_s()
            target = self.target_fill_tokens(rate, loop.per_call, pool.workers)
            tokens = max(0.0, rate + cfg.backlog_gain * (target - loop.backlog)
                         / cfg.backlog_ewma_s)
            step, cap = earned.get(pool.phase, (0.0, 0.0))
            earned[pool.phase] = (step + tokens / loop.per_call * self.period_s,
                                  cap + target / loop.per_call)
        if not earned:
            return None
        limits = {}
        for phase, (step, cap) in earned.items():
            credit = min(self._fill_credit.get(phase, 0.0) + step, max(cap, 1.0))
            limits[phase] = int(credit)
            self._fill_credit[phase] = credit - limits[phase]
        return limits

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
        link_step = self.link_rate(obs) * self.period_s
        limits = self.fill_limits(obs)
        admit = self._admit(min(decode_step, link_step), max(target, 1.0))
        decay = 1.0 - math.exp(-self.period_s / self.config.backlog_ewma_s)
        self._admit_rate += decay * (admit / self.period_s - self._admit_rate)
        decision = self._decision(admit, error, target, self._batch_target(obs, now_s))
        if limits is None and link_step >= decode_step:
            return decision  # buffered's
        if link_step < decode_step:
            reason = AdmissionReason.KV_LINK
        elif min(limits.values()) < admit:
            reason = AdmissionReason.FILL_BACKLOG  # a binding pool's calls held to its loop
        else:
            reason = decision.reason
        return AdmissionDecision(admit=decision.admit, reason=reason,
                                 decode_target_batch=decision.decode_target_batch,
                                 background_limit=decision.background_limit,
                                 pool_limits=limits)

    def skip_idle(self, obs: Observation, first_s: float, ticks: int) -> None:
        """None: the shell ticks `decide` over an idle span (the pools' smoothed figures
        and the admission rate move too; buffered's closed form follows its backlog only)."""
        return None

    def loop_model(self, config: ControlConfig) -> LoopModel:
        """`buffered`'s: each of its loops (decode's over every call, each binding fill
        pool's over that pool's calls) is that proportional law on a smoothed backlog seen
        `lag` late, L(s) = g / (tau s (1 + tau s)) e^{-lag s} (the link bound only lowers
        the gain)."""
        return super().loop_model(config)
