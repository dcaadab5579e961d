"""The orchestrator's slow loop: every slow-loop period, ask the reallocator on the
lagged observation and start the worker move it decides (orchestrator.run.reconfig)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import ObservationLag
from orchestrator.control.realloc import ReallocationPolicy, ReallocDecision
from orchestrator.run.fast_loop import DecisionLog
from orchestrator.run.idle_spans import IdleSpans
from orchestrator.run.plugin_checks import checked_realloc, plugin_failed
from orchestrator.run.reconfig import Reconfigurer


class SlowLoop:
    """Reallocation. `idle`: the fast loop's idle spans (their samples before a decision
    are taken first; a move started wakes the fast loop); `notify`: the run's listeners
    (`on_reallocation`). `decisions`, `times_s`: each decision and when it was made."""

    def __init__(self, *, control: ControlConfig, lag: ObservationLag,
                 reallocator: ReallocationPolicy, pools: frozenset[str],
                 reconfigurer: Reconfigurer, idle: IdleSpans,
                 notify: Callable[..., None], logger: DecisionLog | None = None) -> None:
        self.control, self.lag, self.reallocator, self.pools = control, lag, reallocator, pools
        self.reconfigurer, self.idle, self.notify, self.logger = reconfigurer, idle, notify, logger
        self.decisions: list[ReallocDecision] = []
        self.times_s: list[float] = []

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(self.control.slow_period_s)
        while True:
            now_s = loop.time()
            self.idle.flush_now(loop)  # the idle span's samples before this decision
            try:
                decision = self.reallocator.decide(self.lag.seen_at(now_s), now_s)
            except Exception as exc:
                raise plugin_failed("reallocator", self.reallocator, exc) from exc
            checked_realloc(decision, self.reallocator, self.pools)
            self.decisions.append(decision)
            self.times_s.append(now_s)
            started = decision.move is not None and self.reconfigurer.start(decision.move, now_s)
            if started:
                self.idle.wake()
            self.notify("on_reallocation", decision, now_s)
            if self.logger is not None:
                self.logger.info("reallocation", t_s=round(now_s, 6), reason=decision.reason.value,
                                 imbalance=round(decision.imbalance, 6),
                                 move=(f"{decision.move.from_pool}->{decision.move.to_pool}"
                                       if decision.move else None), started=started)
            await asyncio.sleep(self.control.slow_period_s)
