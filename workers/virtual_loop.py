"""Virtual time: an asyncio event loop whose clock jumps to the next timer when idle.

``VirtualEventLoop`` subclasses the stdlib selector loop. Time is an integer count
of nanoseconds (0.2 - 0.05 is not 0.15 in floats). When no callback is ready, the
loop polls the selector without blocking and then jumps straight to the earliest
timer. Timers due at the same nanosecond fire in the order they were scheduled (the
stdlib heap compares by time only and is not stable, so each timer carries a
sequence number). `workers.clock` hands it out as `VirtualClock`.
"""

from __future__ import annotations

import asyncio
import heapq
import selectors
import sys
from asyncio import format_helpers
from collections.abc import Callable
from contextvars import copy_context
from heapq import heappush
from math import isfinite
from typing import Any

NS_PER_S = 1_000_000_000
# With only its own wake-up pipe registered (threads' call_soon_threadsafe lands in the
# ready queue anyway), a virtual loop that does not block polls its selector this often.
_POLL_EVERY = 64
# asyncio's own heuristics for compacting cancelled timers out of the heap.
_MIN_SCHEDULED_TIMER_HANDLES = 100
_MIN_CANCELLED_TIMER_HANDLES_FRACTION = 0.5
_new_object = object.__new__  # read once: a handle is made ~30 times a development call


def seconds_to_ns(seconds: float) -> int:
    """Round a duration or instant in seconds to the nearest nanosecond."""
    if not isfinite(seconds):
        raise ValueError(f"time in seconds must be finite, got {seconds!r}")
    if type(seconds) is not float and type(seconds) is not int:
        # A numpy float (a priced step's end) as a Python float: the same double, and
        # round() of it ~15x cheaper.
        seconds = float(seconds)
    return round(seconds * NS_PER_S)


def _new_handle(cls: type[asyncio.Handle], callback: Callable[..., object],
                args: tuple[Any, ...], loop: asyncio.AbstractEventLoop, context: Any,
                source_traceback: Any = None) -> asyncio.Handle:
    """A new `cls` (asyncio.Handle or a subclass) with asyncio.Handle.__init__'s fields,
    set without calling it: no debug-flag lookup, and one Python call a callback instead
    of the subclasses' __init__ chain."""
    handle = _new_object(cls)
    handle._context = copy_context() if context is None else context
    handle._loop = loop
    handle._callback = callback
    handle._args = args
    handle._cancelled = False
    handle._repr = None
    handle._source_traceback = source_traceback
    return handle


class _VirtualTimerHandle(asyncio.TimerHandle):
    """A timer ordered by (integer nanoseconds, scheduling sequence); made by
    `VirtualEventLoop._call_at_ns`, which sets its fields."""

    __slots__ = ("_seq", "_when_ns")

    def _key(self) -> tuple[int, int]:
        return (self._when_ns, self._seq)

    def cancel(self) -> None:
        """TimerHandle.cancel and Handle.cancel in one call, reading the loop's fields
        (every sleep cancels its timer on the way out, fired or not)."""
        if not self._cancelled:
            loop = self._loop
            if self._scheduled:
                loop._timer_cancelled_count += 1
            self._cancelled = True
            if loop._debug:
                self._repr = repr(self)
            self._callback = None
            self._args = None

    # heapq only needs __lt__ (the hot one: no tuples built); the rest keep the ordering
    # total and consistent.
    def __lt__(self, other: object) -> bool:
        try:
            when, other_when = self._when_ns, other._when_ns  # type: ignore[attr-defined]
        except AttributeError:
            return NotImplemented
        return when < other_when or (when == other_when and self._seq < other._seq)

    def __le__(self, other: object) -> bool:
        if isinstance(other, _VirtualTimerHandle):
            return self._key() <= other._key()
        return NotImplemented

    def __gt__(self, other: object) -> bool:
        if isinstance(other, _VirtualTimerHandle):
            return self._key() > other._key()
        return NotImplemented

    def __ge__(self, other: object) -> bool:
        if isinstance(other, _VirtualTimerHandle):
            return self._key() >= other._key()
        return NotImplemented

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _VirtualTimerHandle):
            return self is other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._key())


class VirtualEventLoop(asyncio.SelectorEventLoop):
    """A stdlib selector loop whose clock jumps to the next timer when idle.

    Real file descriptors, subprocesses and threads still work: the selector
    is polled with timeout 0 on every iteration while anything beyond the
    loop's own wake-up pipe (or a signal handler) is registered, and every
    64th iteration otherwise (a thread's ``call_soon_threadsafe`` lands in the
    ready queue without it). While a thread or a
    subprocess is busy, though, virtual time keeps jumping past pending
    timers; code that needs wall-clock waits on real I/O belongs on the live
    clock. With nothing ready and no timer at all the loop blocks in
    ``select`` exactly as the stdlib loop does (a thread may still wake it).
    """

    def __init__(self, selector: selectors.BaseSelector | None = None) -> None:
        super().__init__(selector)
        self._now_ns = 0
        self._timer_seq = 0
        # Callbacks run so far (the one running included): a caller that reads it twice
        # knows whether anything else ran in between (the fast loop's unchanged samples).
        self.handles_run = 0
        self._polls_skipped = 0
        self._fd_keys = getattr(self._selector, "_fd_to_key", None)

    async def shutdown_default_executor(self, timeout: float | None = None) -> None:
        """Join the default executor's threads without a timeout. The one `asyncio.run`
        gives (300 s) is in wall seconds, but from Python 3.13 asyncio waits for it with
        a timer on the loop's clock, which here jumps there at once: the join would be
        given up and warned of before the threads could finish."""
        await super().shutdown_default_executor()

    # -- time -------------------------------------------------------------
    def time(self) -> float:
        return self._now_ns / NS_PER_S

    def time_ns(self) -> int:
        """Virtual time in integer nanoseconds since the loop was created."""
        return self._now_ns

    # -- callbacks --------------------------------------------------------
    def call_soon(
        self, callback: Callable[..., object], *args: Any, context: Any = None
    ) -> asyncio.Handle:
        if self._closed or self._debug:  # the stdlib's checks, messages and tracebacks
            return super().call_soon(callback, *args, context=context)
        handle = _new_handle(asyncio.Handle, callback, args, self, context)
        self._ready.append(handle)
        return handle

    # -- timers -----------------------------------------------------------
    def call_later(
        self, delay: float, callback: Callable[..., object], *args: Any, context: Any = None
    ) -> asyncio.TimerHandle:
        # Added in integers so that repeated sleeps never accumulate float error
        # (seconds_to_ns inline: every sleep comes here).
        if type(delay) is not float:
            return self._call_at_ns(self._now_ns + seconds_to_ns(delay), callback, args,
                                    context)
        if not isfinite(delay):
            seconds_to_ns(delay)  # raises its error
        return self._call_at_ns(self._now_ns + round(delay * NS_PER_S), callback, args,
                                context)

    def call_at(
        self, when: float, callback: Callable[..., object], *args: Any, context: Any = None
    ) -> asyncio.TimerHandle:
        # seconds_to_ns inline for a finite float (the links set ~12 timers a call this way).
        if type(when) is float and isfinite(when):
            return self._call_at_ns(round(when * NS_PER_S), callback, args, context)
        return self._call_at_ns(seconds_to_ns(when), callback, args, context)

    def _call_at_ns(
        self,
        when_ns: int,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: Any,
    ) -> asyncio.TimerHandle:
        if self._closed or self._debug:  # the stdlib's checks
            self._check_closed()
            self._check_thread()
            self._check_callback(callback, "call_at")
        timer = _new_handle(_VirtualTimerHandle, callback, args, self, context,
                            format_helpers.extract_stack(sys._getframe(1)) if self._debug
                            else None)
        return self._schedule(timer, when_ns)

    def _schedule(self, timer: _VirtualTimerHandle, when_ns: int) -> asyncio.TimerHandle:
        """Put `timer` on the heap at `when_ns`, after every timer scheduled before it."""
        seq = self._timer_seq = self._timer_seq + 1
        timer._when = when_ns / NS_PER_S
        timer._when_ns = when_ns
        timer._seq = seq
        timer._scheduled = True
        # The heap holds (nanoseconds, sequence, timer): compared as tuples of integers,
        # in C, never reaching the timer itself (sequences are unique).
        heappush(self._scheduled, (when_ns, seq, timer))
        return timer

    def call_at_again(self, timer: asyncio.TimerHandle, when: float) -> asyncio.TimerHandle:
        """`timer`, a timer of this loop whose callback has run (so neither scheduled nor
        waiting to run: the caller knows, e.g. from inside that callback), scheduled again
        at `when` with its callback, arguments and context: `call_at(when, callback,
        *args)` without making a new handle (the links re-arm their timer at almost every
        event). Ordered as a timer made now would be (the next sequence number). A
        closed or debugging loop makes a new handle, with the stdlib's checks."""
        if timer._scheduled or timer._cancelled or timer._loop is not self:
            raise ValueError("call_at_again: the timer is still scheduled, cancelled or "
                             "another loop's")
        if self._closed or self._debug or type(timer) is not _VirtualTimerHandle:
            return self.call_at(when, timer._callback, *timer._args, context=timer._context)
        if type(when) is float and isfinite(when):
            return self._schedule(timer, round(when * NS_PER_S))
        return self._schedule(timer, seconds_to_ns(when))

    # -- one iteration ----------------------------------------------------
    def _watching_io(self) -> bool:
        """Anything registered beyond the loop's own wake-up pipe, or a signal handler:
        then the selector is polled on every iteration."""
        # The stdlib selectors keep their registrations in `_fd_to_key`: read its size
        # directly on this per-iteration path (get_map() is two calls deep).
        keys = self._fd_keys
        registered = len(keys) if keys is not None else len(self._selector.get_map())
        return registered > 1 or bool(getattr(self, "_signal_handlers", None))

    def _drop_cancelled_timers(self) -> None:
        scheduled = self._scheduled
        if (
            len(scheduled) > _MIN_SCHEDULED_TIMER_HANDLES
            and self._timer_cancelled_count / len(scheduled) > _MIN_CANCELLED_TIMER_HANDLES_FRACTION
        ):
            kept = []
            for entry in scheduled:
                if entry[2]._cancelled:
                    entry[2]._scheduled = False
                else:
                    kept.append(entry)
            heapq.heapify(kept)
            self._scheduled = kept
            self._timer_cancelled_count = 0
            return
        while scheduled and scheduled[0][2]._cancelled:
            self._timer_cancelled_count -= 1
            heapq.heappop(scheduled)[2]._scheduled = False

    def _run_once(self) -> None:
        """Iterations until the loop is stopping. Each polls I/O, jumps the clock if idle
        and runs what is due.

        Replaces ``BaseEventLoop._run_once``: the stdlib version would sleep in
        ``select`` until the next timer and compares float deadlines. ``run_forever``
        calls it and stops when ``_stopping`` is set after a call; checking that after
        each iteration here is the same, without a call per iteration.
        """
        ready = self._ready
        popleft = ready.popleft
        heappop = heapq.heappop
        fd_keys = self._fd_keys
        signal_handlers = getattr(self, "_signal_handlers", None)
        # Iterations since the selector was last polled: a local while iterating, kept on
        # the loop between calls.
        polls_skipped = self._polls_skipped
        while True:
            scheduled = self._scheduled
            # `_drop_cancelled_timers` only where it has something to do: a cancelled timer
            # at the head, or a heap large enough to be compacted.
            if self._timer_cancelled_count and scheduled and (
                    scheduled[0][2]._cancelled
                    or len(scheduled) > _MIN_SCHEDULED_TIMER_HANDLES):
                self._drop_cancelled_timers()
                scheduled = self._scheduled
            polls_skipped += 1
            # Polled when idle with no timer (blocking: timeout None), every _POLL_EVERY
            # iterations, or while anything is watched (`_watching_io` inline where the
            # selector's registrations can be counted); the cheap checks first.
            idle = not ready and not scheduled and not self._stopping
            if (idle or polls_skipped >= _POLL_EVERY or signal_handlers
                    or (len(fd_keys) > 1 if fd_keys is not None else self._watching_io())):
                polls_skipped = 0
                event_list = self._selector.select(None if idle else 0)
                self._process_events(event_list)
                event_list = None  # break reference cycles on exceptions, as asyncio does

            if scheduled:
                now_ns = self._now_ns
                when_ns = scheduled[0][0]
                if when_ns > now_ns and not ready and not self._stopping:
                    # Nothing runnable: jump to the earliest deadline instead of waiting.
                    now_ns = self._now_ns = when_ns
                while when_ns <= now_ns:
                    handle = heappop(scheduled)[2]
                    handle._scheduled = False
                    ready.append(handle)
                    if not scheduled:
                        break
                    when_ns = scheduled[0][0]

            # Run only what is ready now; callbacks scheduled by these run next time.
            if self._debug:
                self._run_ready_debug()
            else:
                for _ in range(len(ready)):
                    handle = popleft()
                    if handle._cancelled:
                        continue
                    self.handles_run += 1
                    # Handle._run inline (one Python call less per callback; no asyncio
                    # handle overrides it): the callback in its context, an exception
                    # reported as it reports one.
                    try:
                        handle._context.run(handle._callback, *handle._args)
                    except (SystemExit, KeyboardInterrupt):
                        raise
                    except BaseException as exc:
                        self._callback_failed(handle, exc)
            handle = None
            if self._stopping:
                self._polls_skipped = polls_skipped
                return

    def _run_ready_debug(self) -> None:
        """A debugging loop's run of what is ready now: each handle through
        `Handle._run`, the loop's current handle set while it runs, as asyncio's own
        loop sets it in debug mode."""
        ready = self._ready
        for _ in range(len(ready)):
            handle = ready.popleft()
            if handle._cancelled:
                continue
            self.handles_run += 1
            self._current_handle = handle
            try:
                handle._run()
            finally:
                self._current_handle = None

    def _callback_failed(self, handle: asyncio.Handle, exc: BaseException) -> None:
        """What `asyncio.Handle._run` does with a callback's exception."""
        cb = format_helpers._format_callback_source(handle._callback, handle._args)
        context = {"message": f"Exception in callback {cb}", "exception": exc,
                   "handle": handle}
        if handle._source_traceback:
            context["source_traceback"] = handle._source_traceback
        self.call_exception_handler(context)
