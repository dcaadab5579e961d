"""A decode run's wait: for a poke, or for the run's end.

A decode worker prices a run of steps up to its next retirement and waits once. A poke
(a call joining, a controller changing the target batch) ends the run at the end of the
step in progress. The wait is one future and one timer: the timer of the run's end, or,
after a poke, of the step in progress's end, set on the same future. That is
`wait_for(interrupt.wait(), timeout)` and a sleep to the step's end, told apart by the
result, without a task, a wrapper future and a cancellation, each costing event-loop
turns.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left

import numpy as np


class RunWait:
    """One worker's wait; armed by `until`, at most one at a time."""

    __slots__ = ("_armed",)

    def __init__(self) -> None:
        # While armed: (future, its timer, the run's step ends) until a poke, then
        # (future, the timer of the step in progress's end, None).
        self._armed: tuple[asyncio.Future, asyncio.TimerHandle, object] | None = None

    @property
    def armed(self) -> bool:
        return self._armed is not None

    def until(self, loop: asyncio.AbstractEventLoop, ends: list[float] | np.ndarray,
              poked: bool) -> asyncio.Future:
        """A future that is, at the end of the step in progress at the next poke (at once
        if `poked` already), that step's index in `ends`; None at the run's end
        (`ends[-1]`) without a poke."""
        fut = loop.create_future()
        timeout_s = ends[-1] - loop.time()
        if timeout_s <= 0:
            fut.set_result(None)
        elif poked:
            self._step_end(fut, loop, ends)
        else:
            self._armed = (fut, loop.call_later(timeout_s, self._stepped, fut, None), ends)
        return fut

    def poke(self) -> None:
        """The run waiting, if one is and was not poked yet, ends at the end of its step
        in progress."""
        armed = self._armed
        if armed is not None and armed[2] is not None:
            fut, timer, ends = armed
            timer.cancel()
            if fut.done():
                self._armed = None
            else:
                self._step_end(fut, fut.get_loop(), ends)

    def forget(self) -> None:
        """The run ended (or was cancelled) while its wait was still armed."""
        if self._armed is not None:
            self._armed[1].cancel()
            self._armed = None

    def _step_end(self, fut: asyncio.Future, loop: asyncio.AbstractEventLoop,
                  ends: list[float] | np.ndarray) -> None:
        """A poke: `fut` is the index of the step in progress, at that step's end. Its
        timer is set here, as the run's own sleep to that end was set when the poke woke
        it (the same delay from the same instant: the clock does not move while a woken
        task waits for its turn), one wake-up and one future sooner."""
        t = loop.time()
        j = min(bisect_left(ends, t), len(ends) - 1)
        if ends[j] > t:
            self._armed = (fut, loop.call_later(ends[j] - t, self._stepped, fut, j), None)
        else:
            self._armed = None
            fut.set_result(j)

    def _stepped(self, fut: asyncio.Future, result: int | None) -> None:
        if self._armed is not None and self._armed[0] is fut:
            self._armed = None
        if not fut.done():
            fut.set_result(result)
