"""The orchestrator's fast loop: sample the cluster, decide, apply; skip idle spans.

`FastLoop` is the half of `Orchestrator` (orchestrator.run.replay) that runs
every fast-loop period: it samples the cluster into an observation (recorded
through the observation lag) and the series, asks the admission policy, and
applies its decision (releasing calls to the router, setting decode batch
targets, refusing predicted misses). In virtual time it stops sampling while
the cluster is idle and brings the policy up to date on waking
(docs/metrics.md, "Idle spans").
"""

from __future__ import annotations

import asyncio
from operator import is_

from orchestrator.control.observe import Observation, observation_at
from orchestrator.control.policies.base import AdmissionDecision
from orchestrator.control.snapshot import idle_pools, observe
from orchestrator.run.series import Series
from orchestrator.run.sessions import Pending

_NAN = float("nan")


class PolicyError(RuntimeError):
    """A policy returned something that is not a decision: names the policy."""


class ConservationError(AssertionError):
    """Calls appeared or vanished: the emulator is wrong, not the input."""


class _IdleSpan:
    """The fast loop asleep over an idle span from the sample at `start_ns`: the lead
    samples still to take (`lead`, the next at `next_ns`, seeing `obs` restamped) and
    those taken."""

    __slots__ = ("lead", "next_ns", "obs", "period_ns", "start_ns", "taken")

    def __init__(self, start_ns: int, period_ns: int, lead: int, obs: Observation) -> None:
        self.start_ns, self.period_ns, self.lead, self.obs = start_ns, period_ns, lead, obs
        self.next_ns = start_ns + period_ns
        self.taken = 0


def _wake_up(future: asyncio.Future) -> None:
    """The fast loop's sleep over (asyncio.sleep's own callback: a cancelled sleep stays so)."""
    if not future.cancelled():
        future.set_result(None)


def _series_appends(s: Series) -> tuple:
    """`s` and its columns' bound appends, in the order `FastLoop._record` fills them (a
    record's ~20 appends without an attribute and a method lookup each)."""
    return (s, *(getattr(s, name).append for name in (
        "time_s", "decode_occupancy", "decode_running", "decode_slots", "backlog",
        "ready_depth", "admission_queue", "held", "upstream_waiting", "admitted", "completed",
        "ttft_mean_s", "ticks", "in_flight", "submitted_total", "completed_total",
        "rejected_total", "workers_by_pool")))


class FastLoop:
    """Mixed into `Orchestrator`, whose state it reads and writes."""

    def _apply(self, decision: AdmissionDecision, now_s: float) -> None:
        if not isinstance(decision, AdmissionDecision):
            raise PolicyError(f"controller {self.policy.name!r} returned {type(decision).__name__}"
                              f", not an AdmissionDecision")
        if decision.decode_target_batch is not None:
            self._apply_target_batch(decision.decode_target_batch)
        if decision.reject_ttft_above_s is not None:
            self._reject_predicted_misses(decision, now_s)
        budget, background = decision.admit, decision.background_limit
        if not self.queue or budget <= 0:
            return
        self._touched = True  # the next sample must look again
        released: list[Pending] = []
        for pending in list(self.queue):
            if budget <= 0:
                break
            if not pending.interactive:
                if background is not None and background <= 0:
                    continue
                if background is not None:
                    background -= 1
            released.append(pending)
            budget -= 1
        for pending in released:
            if not self._route(pending, now_s):
                break
            self.queue.remove(pending)
            self.counters["admitted"] += 1
            self._period_admitted += 1

    def _decide_now(self, now_s: float) -> None:
        """An event-driven policy's decision on the cluster as it is now (no lag), applied
        at once; the fast loop's periodic decisions go on beside it."""
        if not self.queue:
            return
        obs = observe(self.runtime, now_s, self.counters, len(self.queue),
                      sum(p.interactive for p in self.queue), self.predictor, {})
        self._apply(self.policy.decide(obs, now_s), now_s)

    def _apply_target_batch(self, per_unit: int) -> None:
        self._touched = True
        for w in self.runtime.decode_workers.values():
            w.set_target_batch(per_unit * w.slots_per_unit)

    def _reject_predicted_misses(self, decision: AdmissionDecision, now_s: float) -> None:
        """Predicted TTFT: time waited, plus the wait for the calls ahead at this period's
        admission rate, plus a typical fill."""
        rate = max(decision.admit, 1) / self.control.fast_period_s
        fill_s = self.predictor.fill_latency_s(self.runtime)
        for position, pending in enumerate(list(self.queue)):
            predicted = now_s - pending.request.arrival_s + position / rate + fill_s
            if predicted > decision.reject_ttft_above_s:
                self._touched = True
                self.queue.remove(pending)
                self._reject(pending)

    def _sample(self, now_s: float, loop=None) -> None:
        """Observe the cluster, record it (lag, series, listeners). `loop`: the running
        virtual loop, when called from the fast loop: if nothing but this loop's own timer
        ran since the last sample and the last decision changed nothing, the cluster is as
        it was: the last observation is restamped, with no busy time in its period."""
        ran = getattr(loop, "handles_run", None)
        touched, self._touched = self._touched, False
        last = self._restampable
        # Two callbacks since the last sample: this loop's sleep timer and its own wake-up.
        if ran is not None and last is not None and ran - self._ran_at == 2 and not touched:
            self._ran_at = ran
            pools = idle_pools(last.pools, self._pool_memo)  # no busy time in this period
            if pools is not last.pools:
                last = self._restampable = last.restamped(last.time_s, pools)
            obs = last.restamped(now_s)
            self.lag.record(obs)
            self._record(obs, now_s, None)
            return
        self._ran_at = ran
        rt = self.runtime
        fill_states = [w.state() for w in rt.fill_workers.values()]
        decode_states = [w.state() for w in rt.decode_workers.values()]
        interactive = sum(p.interactive for p in self.queue) if self.queue else 0
        looked = self._looked
        if looked is not None and self._unchanged(fill_states, decode_states, looked):
            # Every worker hands out the state it had at the last look: no busy time since
            # (busy_s as then), and that look's worker and pool figures hold.
            obs = observe(rt, now_s, self.counters, len(self.queue), interactive,
                          self.predictor, {}, pool_memo=self._pool_memo, same_as=looked[2])
        else:
            period = self._fast_period_s
            busy = {}
            busy_last = self._busy_last
            for states in (fill_states, decode_states):
                for st in states:
                    name, busy_s = st.name, st.busy_s
                    fraction = (busy_s - busy_last.get(name, 0.0)) / period
                    busy[name] = fraction if fraction < 1.0 else 1.0  # min(1.0, fraction)
                    busy_last[name] = busy_s
            obs = observe(rt, now_s, self.counters, len(self.queue), interactive,
                          self.predictor, busy, fill_states, decode_states, self._pool_memo)
        self._looked = (fill_states, decode_states, obs)
        self.lag.record(obs)
        self._restampable = obs
        self._record(obs, now_s, (fill_states, decode_states))

    @staticmethod
    def _unchanged(fill_states: list, decode_states: list, looked: tuple) -> bool:
        """The workers' states are the very objects of the last look (`looked`: its fill
        and decode states and observation): a worker hands its last state out again while
        none of its figures changed (workers.fill, workers.decode)."""
        fill_then, decode_then = looked[0], looked[1]
        return (len(fill_states) == len(fill_then) and len(decode_states) == len(decode_then)
                and all(map(is_, fill_states, fill_then))
                and all(map(is_, decode_states, decode_then)))

    def _record(self, obs: Observation, now_s: float, states: tuple | None) -> None:
        """A sample's bookkeeping: idle repeats, conservation, the series, the HBM peak
        (`states`: the workers' fill and decode states; None for a lead sample, which
        cannot have moved it) and the listeners."""
        rt = self.runtime
        in_flight = len(self._pending)
        if in_flight:  # only an idle sample can repeat the last
            self._same_samples, self._last_obs = 0, None
        else:
            content = obs.content()
            self._same_samples = self._same_samples + 1 if content == self._last_obs else 1
            self._last_obs = content
        c = self.counters
        submitted, completed, rejected = c["submitted"], c["completed"], c["rejected"]
        if submitted != completed + rejected + in_flight:
            raise ConservationError(
                f"at {now_s:.3f} s: submitted {submitted} != completed {completed} + "
                f"rejected {rejected} + in flight {in_flight}")
        s = self.series
        appends = self._appends
        if appends is None or appends[0] is not s:
            appends = self._appends = _series_appends(s)
        (_, time_s, decode_occupancy, decode_running, decode_slots, backlog, ready_depth,
         admission_queue, held, upstream_waiting, admitted, completed_n, ttft_mean_s, ticks,
         in_flight_n, submitted_total, completed_total, rejected_total,
         workers_by_pool) = appends
        done = self._period_done
        queue, ready = obs.admission_queue, obs.ready_depth
        running, slots = obs.decode_running, obs.decode_slots
        time_s(now_s)
        # Observation.decode_occupancy and .backlog, inline: the same operations.
        decode_occupancy(running / slots if slots else 0.0)
        decode_running(running)
        decode_slots(slots)
        backlog(obs.fill_queue + obs.fill_running + ready + obs.decode_loading)
        ready_depth(ready)
        admission_queue(queue)
        # Until the decision on this sample (`_decided`): every queued call held back, as
        # at the run's last sample, which has no decision after it.
        held(queue)
        upstream_waiting(queue + ready)
        admitted(self._period_admitted)
        completed_n(len(done))
        if done:
            ttfts = [r.ttft_s for r in done if r.ttft_s is not None]
            ttft_mean_s(sum(ttfts) / len(ttfts) if ttfts else _NAN)
        else:
            ttft_mean_s(_NAN)
        s.add_breakdown(done)
        ticks(1)
        in_flight_n(in_flight)
        submitted_total(submitted)
        completed_total(completed)
        rejected_total(rejected)
        pools = obs.pools
        if pools is not self._pools_recorded:  # shared when the same pools (restamped)
            self._pools_recorded = pools
            workers = {p.name: p.workers for p in pools}
            last = s.workers_by_pool[-1] if s.workers_by_pool else None
            self._workers_recorded = last if workers == last else workers
        workers_by_pool(self._workers_recorded)
        self._period_done = []
        self._period_admitted = 0
        if states is not None and self._same_samples <= 1:  # HBM moves only with calls
            self._hbm_peak.sample(rt, *states)
        self._notify("on_sample", obs, now_s)

    async def _fast_loop(self) -> None:
        loop = asyncio.get_running_loop()
        period = self.control.fast_period_s
        # Idle spans are skipped in virtual time only: live time passes anyway.
        skips = self.skip_idle and hasattr(loop, "time_ns")
        try:
            while True:
                now_s = loop.time()
                self._sample(now_s, loop)
                decision = self.policy.decide(self.lag.seen_at(now_s), now_s)
                self._apply(decision, now_s)
                self._decided(decision, now_s, 1)
                if skips and self._quiet():
                    await self._skip_idle(loop, now_s)
                    continue
                # asyncio.sleep(period) (period > 0: ControlConfig) without its coroutine
                # and the cancel of its fired timer: the same timer and wake-up.
                woken = loop.create_future()
                timer = loop.call_later(period, _wake_up, woken)
                try:
                    await woken
                except asyncio.CancelledError:
                    timer.cancel()
                    raise
        finally:
            self._skipping_from_s = self._span = None

    def _decided(self, decision: AdmissionDecision, now_s: float, ticks: int,
                 queue: int | None = None, caught_up: bool = False) -> None:
        """Record a decision standing for `ticks` periods; the log only when it changes.
        `queue`: the admission queue it faced and left (an idle sample's: 0), when not the
        queue now. `caught_up`: the decisions of skipped idle periods, whose record
        (`Series.repeat_idle`) holds them already, even when they are one."""
        reason = decision.reason._value_  # .value, without the enum property's call
        if not caught_up:
            s = self.series
            s.reason.append(reason)
            s.admit.append(decision.admit)
            # What the decision left queued: held back (with the ready buffer, the work
            # decode could be running: docs/metrics.md, decode starvation).
            held = len(self.queue) if queue is None else queue
            s.held[-1] = held
            s.upstream_waiting[-1] = held + s.ready_depth[-1]
            self._notify("on_decision", decision, now_s)
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

    def _quiet(self) -> bool:
        """Nothing queued or in flight and no worker moving: until work arrives (which
        wakes the loop) every sample would see the cluster as it is now."""
        return not self._pending and not self.reconfigurer.busy()

    def _lead(self, next_obs: Observation) -> int:
        """Samples a loop sampling every period would still take before skipping: it
        skips once the policy has seen only idle samples for as long as its observation
        lag (`_same_samples` periods of the same content). `next_obs`: the next sample."""
        period, lag = self.control.fast_period_s, self.control.observation_lag_s
        same = self._same_samples
        if same * period > lag:
            return 0
        same = same + 1 if next_obs.content() == self._last_obs else 1
        lead = 1
        while same * period <= lag:
            same, lead = same + 1, lead + 1
        return lead

    def _next_idle_obs(self, next_s: float) -> Observation:
        """The sample at `next_s` of a cluster that stays as it is: this one with no busy
        time in its period (nothing runs) and the same figures otherwise. Called right
        after this period's sample and decision: when the decision changed nothing
        (`_touched`), the cluster is the one that sample saw (no callback ran since, and a
        quiet cluster has no call queued), so its observation is restamped with idle pools
        instead of asking every worker and the predictor again."""
        last = self._restampable
        if last is not None and not self._touched:
            return observation_at(last, next_s, idle_pools(last.pools, self._pool_memo))
        rt = self.runtime
        fill_states = [w.state() for w in rt.fill_workers.values()]
        decode_states = [w.state() for w in rt.decode_workers.values()]
        idle = dict.fromkeys((st.name for st in (*fill_states, *decode_states)), 0.0)
        return observe(rt, next_s, self.counters, 0, 0, self.predictor, idle, fill_states,
                       decode_states, self._pool_memo)

    async def _skip_idle(self, loop, last_s: float) -> None:
        """Sleep until work arrives, then account for the periods skipped and resume on
        the sampling grid. The first samples of the span (`_lead`: those a loop sampling
        every period takes before it skips) are taken as it would have, when the span
        ends or just before anything else happens (`flush_idle`); the rest are caught up
        as skipped."""
        period = self.control.fast_period_s
        period_ns = round(period * 1e9)
        last_ns = round(last_s * 1e9)
        next_obs = self._next_idle_obs((last_ns + period_ns) / 1e9)
        lead = self._lead(next_obs)
        if lead:
            self.lag.hold(period, next_obs, lead)
        else:
            self.lag.hold(period)
        span = self._span = _IdleSpan(last_ns, period_ns, lead, next_obs)
        self._skipping_from_s = last_s
        self._wake.clear()
        cancelled = False
        try:
            await self._wake.wait()
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            now_ns = loop.time_ns()
            # A run stopped on the sampling grid (a deadline) had its sample there while
            # the loop still sampled every period.
            self.flush_idle(now_ns + 1 if cancelled else now_ns)
            self._span = None
            # Samples strictly before now were idle; one at this instant sees the arrival.
            ticks = max(0, -(-(now_ns - last_ns) // period_ns) - 1)
            rest = ticks - span.taken
            self._skipping_from_s = None
            if span.lead:  # woken before the lead was over: those after are taken awake
                self.lag.release(span.taken)
            if rest > 0:
                self._catch_up((last_ns + (span.taken + 1) * period_ns) / 1e9, rest)
        await asyncio.sleep((last_ns + (ticks + 1) * period_ns - now_ns) / 1e9)

    def flush_idle(self, now_ns: int) -> None:
        """Take the lead samples of the idle span due strictly before `now_ns`, as a loop
        sampling every period would have: called before anything changes what they see
        (an arrival, the slow loop) and when the span ends."""
        span = self._span
        if span is None:
            return
        while span.lead and span.next_ns < now_ns:
            now_s = span.next_ns / 1e9
            obs = span.obs if span.obs.time_s == now_s else observation_at(span.obs, now_s)
            self._record(obs, now_s, None)
            decision = self.policy.decide(self.lag.seen_at(now_s), now_s)
            self._apply_idle(decision)
            self._decided(decision, now_s, 1, queue=0)
            span.lead -= 1
            span.taken += 1
            span.next_ns += span.period_ns

    def _apply_idle(self, decision: AdmissionDecision) -> None:
        """A decision on an empty queue: only a decode batch target to apply."""
        if not isinstance(decision, AdmissionDecision):
            raise PolicyError(f"controller {self.policy.name!r} returned "
                              f"{type(decision).__name__}, not an AdmissionDecision")
        if decision.decode_target_batch is not None:
            self._apply_target_batch(decision.decode_target_batch)

    def _catch_up(self, first_s: float, ticks: int) -> None:
        """The skipped periods: the policy brought up to date (in closed form when it can),
        the series, decisions and listeners told of `ticks` idle samples."""
        period = self.control.fast_period_s
        skip = getattr(self.policy, "skip_idle", None)
        seen = self.lag.seen_at(first_s)
        decision = skip(seen, first_s, ticks) if skip is not None and seen is not None else None
        if decision is None:  # tick through: exact, a decide per period
            for k in range(ticks):
                t = first_s + k * period
                decision = self.policy.decide(self.lag.seen_at(t), t)
                if decision.decode_target_batch is not None:
                    self._apply_target_batch(decision.decode_target_batch)
        elif decision.decode_target_batch is not None:
            self._apply_target_batch(decision.decode_target_batch)
        if not isinstance(decision, AdmissionDecision):
            raise PolicyError(f"controller {self.policy.name!r} returned "
                              f"{type(decision).__name__}, not an AdmissionDecision")
        self.series.repeat_idle(first_s, ticks, decision.reason.value, decision.admit)
        self._decided(decision, first_s, ticks, queue=0, caught_up=True)
        self._notify("on_skip", first_s, first_s + (ticks - 1) * period, ticks)

    def wake(self) -> None:
        """Work arrived (a call, a worker move): the fast loop samples again."""
        self._wake.set()
