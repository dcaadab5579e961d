"""The orchestrator's fast loop: sample the cluster, decide, apply.

`FastLoop` is the half of `Orchestrator` (orchestrator.run.replay) that runs
every fast-loop period: it samples the cluster into an observation (recorded
through the observation lag) and the series, asks the admission policy, and
applies its decision (releasing calls to the router, setting decode batch
targets, refusing predicted misses). In virtual time it stops sampling while
the cluster is idle (orchestrator.run.idle_spans).
"""

from __future__ import annotations

import asyncio
from operator import is_

from orchestrator.control.observe import Observation
from orchestrator.control.policies.base import AdmissionDecision
from orchestrator.control.snapshot import idle_pools, observe, worker_totals
from orchestrator.run.plugin_checks import (  # PolicyError: imported from here too
    PolicyError,  # noqa: F401
    checked,
    plugin_failed,
)
from orchestrator.run.series import Series
from orchestrator.run.sessions import Pending
from workers.clock import sleep_on
from workers.request import Request

_NAN = float("nan")


class ConservationError(AssertionError):
    """Calls appeared or vanished: the emulator is wrong, not the input."""


def _series_appends(s: Series) -> tuple:
    """`s` and its columns' bound appends, in the order `FastLoop._append_row` fills them (a
    record's ~20 appends without an attribute and a method lookup each)."""
    return (s, *(getattr(s, name).append for name in (
        "time_s", "decode_occupancy", "decode_running", "decode_slots", "backlog",
        "ready_depth", "admission_queue", "held", "upstream_waiting", "admitted", "completed",
        "ttft_mean_s", "ticks", "in_flight", "submitted_total", "completed_total",
        "rejected_total", "workers_by_pool")))


class FastLoop:
    """Mixed into `Orchestrator`, whose state it reads and writes; its idle spans are
    `IdleSpans`' (orchestrator.run.idle_spans)."""

    def __init__(self) -> None:
        self._fast_period_s = self.control.fast_period_s  # read every sample (a property)
        self.series = Series()
        # (first time, reason, periods): runs of the fast loop's decisions by reason.
        self.decisions: list[tuple[float, str, int]] = []
        self._last_logged: tuple | None = None
        self._same_samples = 0  # consecutive samples equal but for their time
        self._last_obs = None
        # The calls completed and admitted since the last sample (`_record`).
        self._period_done: list[Request] = []
        self._period_admitted = 0
        self._busy_last: dict[str, float] = {}
        self._pool_memo: dict = {}  # what the samples reuse while pools repeat (snapshot)
        # The last observation while restamping it would give the next (`_sample`): it saw
        # no busy time, the loop's callback count then, and whether the decision since
        # changed anything.
        self._restampable = None
        self._ran_at = 0
        self._touched = False
        # The pools of the last sample recorded and its workers by pool (`_append_row`).
        self._pools_recorded: tuple | None = None
        self._workers_recorded: dict[str, int] | None = None
        self._appends: tuple | None = None  # the series' bound appends (`_append_row`)
        # The last look at the workers: their fill and decode states and its observation.
        self._looked: tuple | None = None
        super().__init__()

    def _ask(self, obs: Observation | None, now_s: float) -> AdmissionDecision:
        """The policy's decision; its mistakes (a wrong shape, an exception) stop the run
        as a PolicyError naming it (orchestrator.run.plugin_checks)."""
        try:
            decision = self.policy.decide(obs, now_s)
        except Exception as exc:
            raise plugin_failed("controller", self.policy, exc) from exc
        return checked(decision, self.policy.name)

    def _apply(self, decision: AdmissionDecision, now_s: float) -> None:
        """Apply a decision `_ask` returned."""
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
        self._apply(self._ask(obs, now_s), now_s)

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
            totals = worker_totals(fill_states, decode_states, self._pool_memo,
                                   busy_last=self._busy_last, period_s=self._fast_period_s)
            obs = observe(rt, now_s, self.counters, len(self.queue), interactive,
                          self.predictor, None, totals=totals)
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
        self._append_row(obs, now_s, in_flight, submitted, completed, rejected)
        self._period_done = []
        self._period_admitted = 0
        if states is not None and self._same_samples <= 1:  # HBM moves only with calls
            self._hbm_peak.sample(rt, *states)
        self._notify("on_sample", obs, now_s)

    def _append_row(self, obs: Observation, now_s: float, in_flight: int, submitted: int,
                    completed: int, rejected: int) -> None:
        """The sample's row of the series: the observation's figures, the period's calls
        (`_period_done`, `_period_admitted`), the counters and the workers by pool."""
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

    async def _fast_loop(self) -> None:
        loop = asyncio.get_running_loop()
        period = self.control.fast_period_s
        # Idle spans are skipped in virtual time only: live time passes anyway.
        skips = self.skip_idle and hasattr(loop, "time_ns")
        try:
            while True:
                now_s = loop.time()
                self._sample(now_s, loop)
                decision = self._ask(self.lag.seen_at(now_s), now_s)
                self._apply(decision, now_s)
                self._decided(decision, now_s, 1)
                if skips and self._quiet():
                    await self._skip_idle(loop, now_s)
                    continue
                await sleep_on(loop, period)  # (period > 0: ControlConfig)
        finally:
            self._span = None

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
