"""The fast loop asleep over an idle span, in virtual time.

`IdleSpans` is the half of `Orchestrator` (orchestrator.run.replay) that lets
the fast loop (orchestrator.run.fast_loop) stop sampling while nothing is
queued or in flight and no worker moves: it sleeps until work arrives, takes
the samples a loop sampling every period would have taken before skipping
(the span's lead, as late as it can), and brings the policy, the series and
the listeners up to date on the periods skipped (docs/metrics.md, "Idle
spans").
"""

from __future__ import annotations

import asyncio

from orchestrator.control.observe import Observation, observation_at
from orchestrator.control.policies.base import AdmissionDecision
from orchestrator.control.snapshot import idle_pools, observe
from orchestrator.run.plugin_checks import checked, plugin_failed


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
    """Mixed into `Orchestrator`, whose state it reads and writes; the fast loop
    (`FastLoop._fast_loop`) sleeps here once `_quiet`."""

    def __init__(self) -> None:
        self._wake = asyncio.Event()  # set by work arriving: the idle span is over
        self._span: _IdleSpan | None = None  # the idle span the fast loop sleeps through

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
            decision = self._ask(self.lag.seen_at(now_s), now_s)
            self._apply_idle(decision)
            self._decided(decision, now_s, 1, queue=0)
            span.lead -= 1
            span.taken += 1
            span.next_ns += span.period_ns

    def _apply_idle(self, decision: AdmissionDecision) -> None:
        """A decision on an empty queue: only a decode batch target to apply."""
        if decision.decode_target_batch is not None:
            self._apply_target_batch(decision.decode_target_batch)

    def _catch_up(self, first_s: float, ticks: int) -> None:
        """The skipped periods: the policy brought up to date (in closed form when it can),
        the series, decisions and listeners told of `ticks` idle samples."""
        period = self.control.fast_period_s
        skip = getattr(self.policy, "skip_idle", None)
        seen = self.lag.seen_at(first_s)
        decision = None
        if skip is not None and seen is not None:
            try:
                decision = skip(seen, first_s, ticks)
            except Exception as exc:
                raise plugin_failed("controller", self.policy, exc) from exc
        if decision is None:  # tick through: exact, a decide per period (ticks >= 1)
            for k in range(ticks):
                t = first_s + k * period
                decision = self._ask(self.lag.seen_at(t), t)
                if decision.decode_target_batch is not None:
                    self._apply_target_batch(decision.decode_target_batch)
        elif checked(decision, self.policy.name).decode_target_batch is not None:
            self._apply_target_batch(decision.decode_target_batch)
        self.series.repeat_idle(first_s, ticks, decision.reason.value, decision.admit)
        self._decided(decision, first_s, ticks, queue=0, caught_up=True)
        self._notify("on_skip", first_s, first_s + (ticks - 1) * period, ticks)

    def wake(self) -> None:
        """Work arrived (a call, a worker move): the fast loop samples again."""
        self._wake.set()
