"""The run's clock: virtual time (default) or live time scaled by a speed factor.

Both clocks hand out an ordinary asyncio event loop, so the async shells use
plain ``asyncio.sleep``, ``wait_for``, ``asyncio.timeout``, queues and tasks on
either one; only how the loop waits differs (as in SimPy's
``RealtimeEnvironment``). Core logic never reads a clock: the shells read
``loop.time()`` (or ``Clock.now_s()``) once and pass ``now_s`` down.

Virtual time
    ``VirtualEventLoop`` (``workers.virtual_loop``) subclasses the stdlib
    selector loop; its time is an integer count of nanoseconds and it jumps
    straight to the earliest timer when no callback is ready.

Live time
    ``LiveClock(speed)`` runs uvloop when it is installed, the stdlib selector
    loop otherwise. ``time()`` is (monotonic - start) * speed and every wait is
    divided by ``speed`` on its way to the real clock, so ``asyncio.sleep(1.0)``
    at speed 100 takes ~10 ms of wall time. uvloop cannot be given virtual
    time (its timers live in libuv and never read ``time()``), but scaling the
    delay in ``call_later``/``call_at``, through which every asyncio timer
    passes, is enough for live time. uvloop timers have 1 ms wall resolution,
    so a live deadline may be off by up to speed x 1 ms of loop time.
"""

from __future__ import annotations

import asyncio
import math
import selectors
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar, runtime_checkable

from workers.virtual_loop import VirtualEventLoop

try:  # uvloop is a live-time accelerator only; virtual runs never use it.
    import uvloop
except ImportError:  # pragma: no cover - depends on the platform
    uvloop = None

_T = TypeVar("_T")

# A live timer's resolution in wall seconds (uvloop's timers tick in milliseconds): each
# live wait may end up to speed x this late in loop time.
TIMER_TICK_S = 1e-3


def max_live_speed(fast_period_s: float) -> float:
    """The highest speed at which a live timer's tick is no longer than the fast period
    in loop time: faster, the fast loop could not sample once a period (and at speeds
    far beyond, a wall tick spans hours of loop time: the run stalls)."""
    return fast_period_s / TIMER_TICK_S

__all__ = ["TIMER_TICK_S", "Clock", "LiveClock", "VirtualClock", "VirtualEventLoop", "make_clock",
           "max_live_speed", "sleep_on"]


def wake_up(future: asyncio.Future) -> None:
    """A sleep's timer fired (asyncio.sleep's own callback: a cancelled sleep stays so)."""
    if not future.cancelled():
        future.set_result(None)


async def sleep_on(loop: asyncio.AbstractEventLoop, delay_s: float) -> None:
    """`asyncio.sleep(delay_s)` on `loop`, as given (asyncio.sleep asks for the running
    loop, a system call on Python 3.11), without cancelling its timer once it fired:
    the same timer and wake-up. A delay <= 0 is asyncio.sleep's own (one turn of the
    loop, no timer)."""
    if delay_s <= 0:
        await asyncio.sleep(delay_s)
        return
    woken = loop.create_future()
    timer = loop.call_later(delay_s, wake_up, woken)
    try:
        await woken
    except asyncio.CancelledError:
        timer.cancel()
        raise


def _check_speed(speed: float) -> float:
    if not isinstance(speed, int | float) or isinstance(speed, bool):
        raise TypeError(f"speed must be a number, got {speed!r}")
    if not math.isfinite(speed) or speed <= 0:
        raise ValueError(f"speed must be a finite number > 0, got {speed!r}")
    return float(speed)


class _ScaledSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """Waits 1/speed of the (scaled) timeout the stdlib loop asks for."""

    def __init__(self, speed: float) -> None:
        super().__init__()
        self._speed = speed

    def select(self, timeout: float | None = None) -> list[Any]:
        return super().select(None if timeout is None else timeout / self._speed)


class _ScaledSelectorLoop(asyncio.SelectorEventLoop):
    """Live loop without uvloop.

    The stdlib loop keeps deadlines in ``time()`` units and sleeps in
    ``select`` for (deadline - time()), so scaling ``time()`` and dividing the
    select timeout by ``speed`` is all it takes.
    """

    def __init__(self, speed: float) -> None:
        super().__init__(_ScaledSelector(speed))
        self._speed = speed
        self._start_real_s = time.monotonic()  # wall-clock ok: the live clock's origin

    def time(self) -> float:
        return (time.monotonic() - self._start_real_s) * self._speed  # wall-clock ok


if uvloop is not None:

    class _ScaledUvLoop(uvloop.Loop):  # type: ignore[misc,name-defined]
        """Live loop on uvloop.

        uvloop's timers live in libuv and never read ``time()``; every timer
        (``sleep``, ``wait_for``, ``asyncio.timeout``) goes through
        ``call_later`` or ``call_at``, so the delay is scaled there.
        """

        def __init__(self, speed: float) -> None:
            super().__init__()
            self._speed = speed
            self._start_real_s = super().time()

        def time(self) -> float:
            return (super().time() - self._start_real_s) * self._speed

        def call_later(
            self, delay: float, callback: Callable[..., object], *args: Any, context: Any = None
        ) -> asyncio.TimerHandle:
            return super().call_later(delay / self._speed, callback, *args, context=context)

        def call_at(
            self, when: float, callback: Callable[..., object], *args: Any, context: Any = None
        ) -> asyncio.TimerHandle:
            return self.call_later(when - self.time(), callback, *args, context=context)


@runtime_checkable
class Clock(Protocol):
    """What the entry point chooses once: which loop runs the shells."""

    @property
    def name(self) -> str: ...

    def new_event_loop(self) -> asyncio.AbstractEventLoop: ...

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T: ...

    def now_s(self) -> float: ...


class _ClockBase:
    name = "base"

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def _make_loop(self) -> asyncio.AbstractEventLoop:
        raise NotImplementedError

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        """A fresh loop whose time starts at 0.0; ``now_s`` follows it."""
        self._loop = self._make_loop()
        return self._loop

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` to completion on a fresh loop, like ``asyncio.run``."""
        box: list[_T] = []

        async def main() -> None:
            box.append(await coro)

        # The main task returns nothing: on its way out the Runner checks its SIGINT
        # handler with signal.getsignal, which builds the repr of that handler, the main
        # task and so its result (Python 3.11) -- a whole replay's result (every request),
        # seconds for a large run.
        with asyncio.Runner(loop_factory=self.new_event_loop) as runner:
            runner.run(main())
        return box[0]

    def now_s(self) -> float:
        """Seconds on the most recent loop this clock made (0.0 at its start)."""
        if self._loop is None:
            raise RuntimeError(f"{self.name} clock has no event loop yet: call run() first")
        return self._loop.time()


class VirtualClock(_ClockBase):
    """Deterministic virtual time: as fast as the CPU allows."""

    name = "virtual"

    def _make_loop(self) -> asyncio.AbstractEventLoop:
        return VirtualEventLoop()


class LiveClock(_ClockBase):
    """Real time times ``speed`` (speed 2.0 runs twice as fast as the wall)."""

    name = "live"

    def __init__(self, speed: float = 1.0, *, use_uvloop: bool = True) -> None:
        super().__init__()
        self.speed = _check_speed(speed)
        self.uses_uvloop = use_uvloop and uvloop is not None

    def _make_loop(self) -> asyncio.AbstractEventLoop:
        if self.uses_uvloop:
            return _ScaledUvLoop(self.speed)
        return _ScaledSelectorLoop(self.speed)


def make_clock(kind: str, speed: float = 1.0) -> Clock:
    """The clock for ``--clock virtual|live [--speed X]``."""
    if kind == "virtual":
        return VirtualClock()
    if kind == "live":
        return LiveClock(speed)
    raise ValueError(f"clock must be 'virtual' or 'live', got {kind!r}")
