"""The orchestrator's fast loop: sample the cluster, decide, apply.

`FastLoop` runs every fast-loop period: it samples the cluster into an observation
(`orchestrator.run.sampler`, recorded through the observation lag) and the series, asks
the admission policy, and applies its decision (releasing calls from the admission queue
to the router, setting decode batch targets, refusing predicted misses). In virtual time
it stops sampling while the cluster is idle (`orchestrator.run.idle_spans`).

What it works on is given when it is built: the admission queue, the workers' runtime
(their batch targets), the policy, the series, the observation lag and the sampler;
what it asks of the run it belongs to is `LoopHost` (the `Orchestrator`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol

from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation, ObservationLag
from orchestrator.control.policies.base import AdmissionDecision, AdmissionPolicy
from orchestrator.run.idle_spans import IdleSpans
from orchestrator.run.plugin_checks import (  # PolicyError: imported from here too
    PolicyError,  # noqa: F401
    checked,
    plugin_failed,
)
from orchestrator.run.sampler import HbmPeak, Sampler
from orchestrator.run.series import Series
from orchestrator.run.sessions import Pending
from workers.clock import sleep_on
from workers.request import Request
from workers.runtime import ClusterRuntime

_NAN = float("nan")


class ConservationError(AssertionError):
    """Calls appeared or vanished: the emulator is wrong, not the input."""


class DecisionLog(Protocol):
    """What the run logs decisions to (`output.DecisionFile`; a structlog logger fits)."""

    def info(self, event: str, **fields: object) -> None: ...


class LoopHost(Protocol):
    """What the fast loop asks of the run it belongs to."""

    counters: dict[str, int]  # submitted, admitted, completed, retired, rejected, ...

    def in_flight(self) -> int:
        """Calls submitted and not yet completed or rejected."""
        ...

    def moving(self) -> bool:
        """A worker is being moved or brought up (orchestrator.run.reconfig)."""
        ...

    def route(self, pending: Pending, now_s: float) -> bool:
        """Send an admitted call to a fill worker; False when the router found none."""
        ...

    def reject(self, pending: Pending) -> None:
        """Refuse a call (it is no longer queued)."""
        ...

    def fill_pool(self, pending: Pending) -> str | None:
        """The fill pool (phase) the router would send a queued call to now."""
        ...

    def notify(self, event: str, *args: object) -> None:
        """Tell the run's listeners (`on_sample`, `on_decision`, `on_skip`)."""
        ...


class FastLoop:
    def __init__(self, *, queue: deque[Pending], runtime: ClusterRuntime,
                 policy: AdmissionPolicy, series: Series, control: ControlConfig,
                 lag: ObservationLag, sampler: Sampler, hbm_peak: HbmPeak, host: LoopHost,
                 logger: DecisionLog | None = None, skip_idle: bool = True) -> None:
        self.queue, self.runtime, self.policy, self.series = queue, runtime, policy, series
        self.control, self.lag, self.sampler, self.hbm_peak = control, lag, sampler, hbm_peak
        self.host, self.logger, self.skip_idle = host, logger, skip_idle
        self.period_s = control.fast_period_s
        # (first time, reason, periods): runs of the fast loop's decisions by reason.
        self.decisions: list[tuple[float, str, int]] = []
        self._last_logged: tuple | None = None
        self.same_samples = 0  # consecutive samples equal but for their time
        self.last_content: tuple | None = None  # the last sample's, while idle
        # The calls completed and admitted since the last sample (`_record`).
        self._period_done: list[Request] = []
        self._period_admitted = 0
        # The last observation while restamping it would give the next (`sample`): it saw
        # no busy time, the loop's callback count then, and whether the decision since
        # changed anything.
        self.restampable: Observation | None = None
        self._ran_at: int | None = 0
        self.touched = False
        # The pools of the last sample recorded and its workers by pool (`_append_row`).
        self._pools_recorded: tuple | None = None
        self._workers_recorded: dict[str, int] | None = None
        self.idle = IdleSpans(self)
        # A policy that keeps its own admissions log is told the admissions counter after
        # every release (policies.smith: its Smith predictor counts what it admitted since
        # the observation it acts on).
        hook = getattr(policy, "on_admitted", None)
        self._tell_admitted = hook if callable(hook) else None

    def completed(self, req: Request) -> None:
        """A call completed in this period (the next sample counts it)."""
        self._period_done.append(req)

    def ask(self, obs: Observation | None, now_s: float) -> AdmissionDecision:
        """The policy's decision; its mistakes (a wrong shape, an exception) stop the run
        as a PolicyError naming it (orchestrator.run.plugin_checks)."""
        try:
            decision = self.policy.decide(obs, now_s)
        except Exception as exc:
            raise plugin_failed("controller", self.policy, exc) from exc
        return checked(decision, self.policy.name)

    def _apply(self, decision: AdmissionDecision, now_s: float) -> None:
        """Apply a decision `ask` returned."""
        if decision.decode_target_batch is not None:
            self.apply_target_batch(decision.decode_target_batch)
        if decision.reject_ttft_above_s is not None:
            self._reject_predicted_misses(decision, now_s)
        budget, background = decision.admit, decision.background_limit
        if not self.queue or budget <= 0:
            return
        self.touched = True  # the next sample must look again
        released: list[Pending] = []
        limits = decision.pool_limits
        if limits is not None:
            limits = dict(limits)  # spent as calls are released
        for pending in list(self.queue):
            if budget <= 0:
                break
            if not pending.interactive and background is not None and background <= 0:
                continue
            if limits is not None and not self._within(pending, limits):
                continue
            if not pending.interactive and background is not None:
                background -= 1
            released.append(pending)
            budget -= 1
        for pending in released:
            if not self.host.route(pending, now_s):
                break
            self.queue.remove(pending)
            self.host.counters["admitted"] += 1
            self._period_admitted += 1
        if released and self._tell_admitted is not None:
            try:
                self._tell_admitted(self.host.counters["admitted"], now_s)
            except Exception as exc:
                raise plugin_failed("controller", self.policy, exc) from exc

    def _within(self, pending: Pending, limits: dict[str, int]) -> bool:
        """Whether `pending` may be released under the per-pool caps `limits` (spending
        one of its pool's): its pool asked of the router again now, unless the pool it
        was routed to on arrival has no cap left (policies.base, admission per pool)."""
        if limits.get(pending.fill_pool, 1) <= 0:
            return False
        pool = pending.fill_pool = self.host.fill_pool(pending)
        left = limits.get(pool)
        if left is None:
            return True
        if left <= 0:
            return False
        limits[pool] = left - 1
        return True

    def decide_now(self, now_s: float) -> None:
        """An event-driven policy's decision on the cluster as it is now (no lag), applied
        at once; the fast loop's periodic decisions go on beside it."""
        if not self.queue:
            return
        obs = self.sampler.look_still(now_s, self.host.counters, len(self.queue),
                                      sum(p.interactive for p in self.queue))
        self._apply(self.ask(obs, now_s), now_s)

    def decide_lagged(self, now_s: float) -> None:
        """A policy that decides on arrivals too (`decides_on_arrival`) asked on the newest
        observation the lag lets it see, as at a period, and its decision applied at once;
        unlike `decide_now`, no unlagged look at the cluster."""
        if not self.queue:
            return
        self._apply(self.ask(self.lag.seen_at(now_s), now_s), now_s)

    def apply_target_batch(self, per_unit: int) -> None:
        self.touched = True
        for w in self.runtime.decode_workers.values():
            w.set_target_batch(per_unit * w.slots_per_unit)

    def _reject_predicted_misses(self, decision: AdmissionDecision, now_s: float) -> None:
        """Predicted TTFT: time waited, plus the wait for the calls ahead at the rate the
        decision names (`release_rate_per_s`; else this period's admission rate), plus a
        typical fill."""
        rate = decision.release_rate_per_s or max(decision.admit, 1) / self.period_s
        fill_s = self.sampler.predicted_fill_latency_s()
        for position, pending in enumerate(list(self.queue)):
            predicted = now_s - pending.request.arrival_s + position / rate + fill_s
            if predicted > decision.reject_ttft_above_s:
                self.touched = True
                self.queue.remove(pending)
                self.host.reject(pending)

    def sample(self, now_s: float, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Observe the cluster, record it (lag, series, listeners). `loop`: the running
        virtual loop, when called from the fast loop: if nothing but this loop's own timer
        ran since the last sample and the last decision changed nothing, the cluster is as
        it was: the last observation is restamped, with no busy time in its period."""
        ran = getattr(loop, "handles_run", None)
        touched, self.touched = self.touched, False
        last = self.restampable
        # Two callbacks since the last sample: this loop's sleep timer and its own wake-up.
        if ran is not None and last is not None and ran - self._ran_at == 2 and not touched:
            self._ran_at = ran
            pools = self.sampler.idle_pools(last.pools)  # no busy time in this period
            if pools is not last.pools:
                last = self.restampable = last.restamped(last.time_s, pools)
            obs = last.restamped(now_s)
            self.lag.record(obs)
            self.record(obs, now_s, None)
            return
        self._ran_at = ran
        obs, states = self.sampler.look(now_s, self.host.counters, self.queue)
        self.lag.record(obs)
        self.restampable = obs
        self.record(obs, now_s, states)

    def record(self, obs: Observation, now_s: float, states: tuple | None) -> None:
        """A sample's bookkeeping: idle repeats, conservation, the series, the HBM peak
        (`states`: the workers' fill and decode states; None for a lead sample, which
        cannot have moved it) and the listeners."""
        in_flight = self.host.in_flight()
        if in_flight:  # only an idle sample can repeat the last
            self.same_samples, self.last_content = 0, None
        else:
            content = obs.content()
            self.same_samples = self.same_samples + 1 if content == self.last_content else 1
            self.last_content = content
        c = self.host.counters
        submitted, completed, rejected = c["submitted"], c["completed"], c["rejected"]
        if submitted != completed + rejected + in_flight:
            raise ConservationError(
                f"at {now_s:.3f} s: submitted {submitted} != completed {completed} + "
                f"rejected {rejected} + in flight {in_flight}")
        self._append_row(obs, now_s, in_flight, submitted, completed, rejected)
        self._period_done = []
        self._period_admitted = 0
        if states is not None and self.same_samples <= 1:  # HBM moves only with calls
            self.hbm_peak.sample(self.runtime, *states)
        self.host.notify("on_sample", obs, now_s)

    def _append_row(self, obs: Observation, now_s: float, in_flight: int, submitted: int,
                    completed: int, rejected: int) -> None:
        """The sample's row of the series: the observation's figures, the period's calls
        (`_period_done`, `_period_admitted`), the counters and the workers by pool."""
        s = self.series
        done = self._period_done
        s.time_s.append(now_s)
        s.decode_occupancy.append(obs.decode_occupancy)
        s.decode_running.append(obs.decode_running)
        s.decode_slots.append(obs.decode_slots)
        s.decode_draining.append(obs.decode_draining)
        s.backlog.append(obs.backlog)
        s.ready_depth.append(obs.ready_depth)
        s.admission_queue.append(obs.admission_queue)
        # Until the decision on this sample (`decided`): every queued call held back, as
        # at the run's last sample, which has no decision after it.
        s.held.append(obs.admission_queue)
        s.upstream_waiting.append(obs.admission_queue + obs.ready_depth)
        s.admitted.append(self._period_admitted)
        s.completed.append(len(done))
        ttfts = [r.ttft_s for r in done if r.ttft_s is not None]
        s.ttft_mean_s.append(sum(ttfts) / len(ttfts) if ttfts else _NAN)
        s.add_breakdown(done)
        s.ticks.append(1)
        s.in_flight.append(in_flight)
        s.submitted_total.append(submitted)
        s.completed_total.append(completed)
        s.rejected_total.append(rejected)
        pools = obs.pools
        if pools is not self._pools_recorded:  # shared when the same pools (restamped)
            self._pools_recorded = pools
            workers = {p.name: p.workers for p in pools}
            last = s.workers_by_pool[-1] if s.workers_by_pool else None
            self._workers_recorded = last if workers == last else workers
        s.workers_by_pool.append(self._workers_recorded)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        # Idle spans are skipped in virtual time only: live time passes anyway.
        skips = self.skip_idle and hasattr(loop, "time_ns")
        try:
            while True:
                now_s = loop.time()
                self.sample(now_s, loop)
                decision = self.ask(self.lag.seen_at(now_s), now_s)
                self._apply(decision, now_s)
                self.decided(decision, now_s, 1)
                if skips and self.quiet():
                    await self.idle.sleep(loop, now_s)
                    continue
                await sleep_on(loop, self.period_s)  # (period > 0: ControlConfig)
        finally:
            self.idle.span = None

    def quiet(self) -> bool:
        """Nothing queued or in flight and no worker moving: until work arrives (which
        wakes the loop) every sample would see the cluster as it is now."""
        return not self.host.in_flight() and not self.host.moving()

    def decided(self, decision: AdmissionDecision, now_s: float, ticks: int,
                queue: int | None = None, caught_up: bool = False) -> None:
        """Record a decision standing for `ticks` periods; the log only when it changes.
        `queue`: the admission queue it faced and left (an idle sample's: 0), when not the
        queue now. `caught_up`: the decisions of skipped idle periods, whose record
        (`Series.repeat_idle`) holds them already, even when they are one."""
        reason = decision.reason.value
        if not caught_up:
            s = self.series
            s.reason.append(reason)
            s.admit.append(decision.admit)
            # What the decision left queued: held back (with the ready buffer, the work
            # decode could be running: docs/metrics.md, decode starvation).
            held = len(self.queue) if queue is None else queue
            s.held[-1] = held
            s.upstream_waiting[-1] = held + s.ready_depth[-1]
            self.host.notify("on_decision", decision, now_s)
        decisions = self.decisions
        if not decisions or decisions[-1][1] != reason:
            decisions.append((now_s, reason, ticks))
        else:
            t, r, n = decisions[-1]
            decisions[-1] = (t, r, n + ticks)
        if self.logger is None:
            return
        key = (decision.admit, reason, decision.decode_target_batch)
        if key != self._last_logged:
            self._last_logged = key
            self.logger.info("admission", t_s=round(now_s, 6), controller=self.policy.name,
                             admit=decision.admit, reason=reason,
                             decode_target_batch=decision.decode_target_batch,
                             queue=len(self.queue) if queue is None else queue,
                             periods=ticks)
