"""The fast loop asleep over an idle span, in virtual time.

`IdleSpans`, the fast loop's own (orchestrator.run.fast_loop), lets it stop
sampling while nothing is queued or in flight and no worker moves: it sleeps
until work arrives, takes
the samples a loop sampling every period would have taken before skipping
(the span's lead, as late as it can), and brings the policy, the series and
the listeners up to date on the periods skipped (docs/metrics.md, "Idle
spans").
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation, ObservationLag
from orchestrator.control.policies.base import AdmissionDecision, AdmissionPolicy
from orchestrator.run.plugin_checks import checked, plugin_failed
from orchestrator.run.sampler import Sampler
from orchestrator.run.series import Series


class IdleHost(Protocol):
    """What an idle span asks of the run: its counters and its listeners."""

    counters: dict[str, int]

    def notify(self, event: str, *args: object) -> None: ...


class IdleLoop(Protocol):
    """What an idle span asks of the fast loop (orchestrator.run.fast_loop.FastLoop):
    its parts, its idle bookkeeping and its decision steps."""

    control: ControlConfig
    host: IdleHost
    lag: ObservationLag
    period_s: float
    policy: AdmissionPolicy
    sampler: Sampler
    series: Series
    same_samples: int
    last_content: tuple | None
    restampable: Observation | None
    touched: bool

    def ask(self, obs: Observation | None, now_s: float) -> AdmissionDecision: ...

    def apply_target_batch(self, per_unit: int) -> None: ...

    def record(self, obs: Observation, now_s: float, states: tuple | None) -> None: ...

    def decided(self, decision: AdmissionDecision, now_s: float, ticks: int,
                queue: int | None = None, caught_up: bool = False) -> None: ...


class _IdleSpan:
    """The fast loop asleep over an idle span from the sample at `start_ns`: the lead
    samples still to take (`lead`, the next at `next_ns`, seeing `obs` restamped) and
    those taken."""

    __slots__ = ("lead", "next_ns", "obs", "period_ns", "start_ns", "taken")

    def __init__(self, start_ns: int, period_ns: int, lead: int, obs: Observation) -> None:
        self.start_ns, self.period_ns, self.lead, self.obs = start_ns, period_ns, lead, obs
        self.next_ns = start_ns + period_ns
        self.taken = 0


class IdleSpans:
    """The fast loop's sleep over idle spans (`FastLoop.run` sleeps here once quiet):
    it records samples, asks the policy and records decisions through the loop."""

    def __init__(self, loop: IdleLoop) -> None:
        self.loop = loop
        self._wake = asyncio.Event()  # set by work arriving: the idle span is over
        self.span: _IdleSpan | None = None  # the idle span the fast loop sleeps through

    def _lead(self, next_obs: Observation) -> int:
        """Samples a loop sampling every period would still take before skipping: it
        skips once the policy has seen only idle samples for as long as its observation
        lag (`same_samples` periods of the same content). `next_obs`: the next sample."""
        fast = self.loop
        period, lag = fast.period_s, fast.control.observation_lag_s
        same = fast.same_samples
        if same * period > lag:
            return 0
        same = same + 1 if next_obs.content() == fast.last_content else 1
        lead = 1
        while same * period <= lag:
            same, lead = same + 1, lead + 1
        return lead

    def _next_idle_obs(self, next_s: float) -> Observation:
        """The sample at `next_s` of a cluster that stays as it is: this one with no busy
        time in its period (nothing runs) and the same figures otherwise. Called right
        after this period's sample and decision: when the decision changed nothing
        (`touched`), the cluster is the one that sample saw (no callback ran since, and a
        quiet cluster has no call queued), so its observation is restamped with idle pools
        instead of asking every worker and the predictor again."""
        fast = self.loop
        last = fast.restampable
        if last is not None and not fast.touched:
            return fast.sampler.idle(last, next_s)
        return fast.sampler.look_still(next_s, fast.host.counters, 0, 0)

    async def sleep(self, loop: asyncio.AbstractEventLoop, last_s: float) -> None:
        """Sleep until work arrives, then account for the periods skipped and resume on
        the sampling grid. The first samples of the span (`_lead`: those a loop sampling
        every period takes before it skips) are taken as it would have, when the span
        ends or just before anything else happens (`flush`); the rest are caught up
        as skipped."""
        lag = self.loop.lag
        period = self.loop.period_s
        period_ns = round(period * 1e9)
        last_ns = round(last_s * 1e9)
        next_obs = self._next_idle_obs((last_ns + period_ns) / 1e9)
        lead = self._lead(next_obs)
        if lead:
            lag.hold(period, next_obs, lead)
        else:
            lag.hold(period)
            # No sample to take: the cluster stays as this one saw it (listeners: on_idle).
            self.loop.host.notify("on_idle", last_s)
        span = self.span = _IdleSpan(last_ns, period_ns, lead, next_obs)
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
            self.flush(now_ns + 1 if cancelled else now_ns)
            self.span = None
            # Samples strictly before now were idle; one at this instant sees the arrival.
            ticks = max(0, -(-(now_ns - last_ns) // period_ns) - 1)
            rest = ticks - span.taken
            if span.lead:  # woken before the lead was over: those after are taken awake
                lag.release(span.taken)
            if rest > 0:
                self._catch_up((last_ns + (span.taken + 1) * period_ns) / 1e9, rest)
        await asyncio.sleep((last_ns + (ticks + 1) * period_ns - now_ns) / 1e9)

    def flush_now(self, loop: asyncio.AbstractEventLoop) -> None:
        """`flush` at the loop's present, while an idle span lasts (virtual time only: a
        live loop never skips, so it has no span and no integer clock)."""
        if self.span is not None:
            self.flush(loop.time_ns())

    def flush(self, now_ns: int) -> None:
        """Take the lead samples of the idle span due strictly before `now_ns`, as a loop
        sampling every period would have: called before anything changes what they see
        (an arrival, the slow loop) and when the span ends."""
        span = self.span
        if span is None:
            return
        fast = self.loop
        now_s = None
        while span.lead and span.next_ns < now_ns:
            now_s = span.next_ns / 1e9
            obs = span.obs if span.obs.time_s == now_s else span.obs.restamped(now_s)
            fast.record(obs, now_s, None)
            decision = fast.ask(fast.lag.seen_at(now_s), now_s)
            self._apply_idle(decision)
            fast.decided(decision, now_s, 1, queue=0)
            span.lead -= 1
            span.taken += 1
            span.next_ns += span.period_ns
        if now_s is not None:  # the cluster as those samples saw it, before it changes
            fast.host.notify("on_idle", now_s)

    def _apply_idle(self, decision: AdmissionDecision) -> None:
        """A decision on an empty queue: only a decode batch target to apply."""
        if decision.decode_target_batch is not None:
            self.loop.apply_target_batch(decision.decode_target_batch)

    def _catch_up(self, first_s: float, ticks: int) -> None:
        """The skipped periods: the policy brought up to date (in closed form when it can),
        the series, decisions and listeners told of `ticks` idle samples."""
        fast = self.loop
        period, policy = fast.period_s, fast.policy
        skip = getattr(policy, "skip_idle", None)
        seen = fast.lag.seen_at(first_s)
        decision = None
        if skip is not None and seen is not None:
            try:
                decision = skip(seen, first_s, ticks)
            except Exception as exc:
                raise plugin_failed("controller", policy, exc) from exc
        if decision is None:  # tick through: exact, a decide per period (ticks >= 1)
            for k in range(ticks):
                t = first_s + k * period
                decision = fast.ask(fast.lag.seen_at(t), t)
                self._apply_idle(decision)
        elif checked(decision, policy.name).decode_target_batch is not None:
            fast.apply_target_batch(decision.decode_target_batch)
        fast.series.repeat_idle(first_s, ticks, decision.reason.value, decision.admit)
        fast.decided(decision, first_s, ticks, queue=0, caught_up=True)
        fast.host.notify("on_skip", first_s, first_s + (ticks - 1) * period, ticks)

    def wake(self) -> None:
        """Work arrived (a call, a worker move): the fast loop samples again."""
        self._wake.set()
