"""The virtual and live clocks: plain asyncio code runs on both."""

import asyncio
import math
import time
import warnings

import numpy as np
import pytest

from workers.clock import (
    Clock,
    LiveClock,
    VirtualClock,
    VirtualEventLoop,
    make_clock,
)
from workers.virtual_loop import seconds_to_ns


def run_virtual(coro):
    return VirtualClock().run(coro)


def test_virtual_sleep_never_waits_on_the_wall_clock():
    async def main():
        loop = asyncio.get_running_loop()
        for _ in range(3600):
            await asyncio.sleep(3600.0)
        return loop.time()

    # 150 days of sleeps: a clock that waited would take that long. The bound only guards
    # against that (the sleeps take milliseconds of wall time; no machine is that slow).
    wall_start = time.monotonic()
    assert run_virtual(main()) == 3600.0 * 3600.0
    assert time.monotonic() - wall_start < 60.0


def test_time_is_integer_nanoseconds_so_sums_are_exact():
    async def main():
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.1)
        await asyncio.sleep(0.2)
        at_point_three = loop.time()
        await asyncio.sleep(0.05)
        await asyncio.sleep(0.1)
        return at_point_three, loop.time_ns(), loop.time()

    at_point_three, end_ns, end_s = run_virtual(main())
    assert 0.1 + 0.2 != 0.3 and 0.2 - 0.05 != 0.15  # floats drift; the clock does not
    assert at_point_three == 0.3
    assert (end_ns, end_s) == (450_000_000, 0.45)
    assert seconds_to_ns(0.2) - seconds_to_ns(0.05) == seconds_to_ns(0.15)


def test_wait_for_and_timeout_fire_at_exact_virtual_times():
    async def main():
        loop = asyncio.get_running_loop()
        fired = []
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.sleep(10.0), timeout=2.5)
        fired.append(loop.time())
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.75):
                await asyncio.Event().wait()
        fired.append(loop.time())
        result = await asyncio.wait_for(asyncio.sleep(1.0, result="done"), timeout=3.0)
        fired.append(loop.time())
        return fired, result

    assert run_virtual(main()) == ([2.5, 3.25, 4.25], "done")


def test_queues_and_tasks_work_unchanged():
    async def producer(queue):
        for item in range(5):
            await asyncio.sleep(0.5)
            await queue.put(item)
        await queue.put(None)

    async def consumer(queue, loop):
        seen = []
        while (item := await queue.get()) is not None:
            seen.append((item, loop.time()))
        return seen

    async def main():
        loop = asyncio.get_running_loop()
        queue = asyncio.Queue(maxsize=1)
        prod = asyncio.create_task(producer(queue))
        seen = await asyncio.create_task(consumer(queue, loop))
        await prod
        return seen

    assert run_virtual(main()) == [(0, 0.5), (1, 1.0), (2, 1.5), (3, 2.0), (4, 2.5)]


def _equal_time_events():
    """Forty tasks that all wake at 1.0 s, having scheduled that wake at 0, 0.25 or 0.5 s."""
    events = []

    async def sleeper(name):
        loop = asyncio.get_running_loop()
        first_s = (name % 3) * 0.25
        await asyncio.sleep(first_s)
        await asyncio.sleep(1.0 - first_s)
        events.append((loop.time_ns(), name))

    async def main():
        await asyncio.gather(*(sleeper(i) for i in range(40)))

    run_virtual(main())
    return events


def test_equal_time_order_is_deterministic_and_fifo():
    first, second = _equal_time_events(), _equal_time_events()
    assert first == second
    assert {t_ns for t_ns, _ in first} == {1_000_000_000}
    # FIFO: wakes scheduled at 0 s come first (in task order), then 0.25 s, then 0.5 s.
    assert [name for _, name in first] == sorted(range(40), key=lambda i: (i % 3, i))


def test_equal_deadlines_fire_in_scheduling_order():
    async def main():
        loop = asyncio.get_running_loop()
        fired = []
        # Interleave an earlier timer so the heap is reshuffled between pushes.
        for i in range(200):
            loop.call_later(1.0, fired.append, i)
            loop.call_later(0.5 if i % 2 else 0.7, lambda: None)
        await asyncio.sleep(2.0)
        return fired

    assert run_virtual(main()) == list(range(200))


def test_a_timer_armed_again_fires_as_a_new_timer_would():
    """`call_at_again` re-arms a timer that has fired (the same handle) and orders it as a
    timer made at that moment: the same callbacks at the same times, in the same order,
    as with `call_at`, against other timers due at the same nanosecond too."""
    def trace(again: bool) -> list:
        loop = VirtualEventLoop()
        fired, timer = [], []

        def tick():
            fired.append((loop.time_ns(), "tick"))
            if len(fired) > 10:
                loop.stop()
                return
            # Another timer for the next tick's nanosecond, armed first: it fires first.
            loop.call_at(loop.time() + 0.25, lambda: fired.append((loop.time_ns(), "other")))
            if again:
                assert loop.call_at_again(timer[0], loop.time() + 0.25) is timer[0]
            else:
                timer[0] = loop.call_at(loop.time() + 0.25, tick)

        timer.append(loop.call_at(0.5, tick))
        loop.run_forever()
        loop.close()
        return fired

    assert trace(again=True) == trace(again=False)
    assert trace(again=True)[:3] == [(500_000_000, "tick"), (750_000_000, "other"),
                                     (750_000_000, "tick")]


def test_only_a_timer_that_fired_can_be_armed_again():
    loop = VirtualEventLoop()
    try:
        timer = loop.call_at(1.0, lambda: None)
        with pytest.raises(ValueError, match="still scheduled"):
            loop.call_at_again(timer, 2.0)
        timer.cancel()
        with pytest.raises(ValueError, match="cancelled"):
            loop.call_at_again(timer, 2.0)
        loop.set_debug(True)  # a debugging loop makes a new handle, with its checks
        ran = []
        fired = loop.call_at(1.0, ran.append, 1)
        loop.call_at(1.5, loop.stop)
        loop.run_forever()
        again = loop.call_at_again(fired, 2.0)
        assert again is not fired and again.when() == 2.0
        loop.call_at(2.5, loop.stop)
        loop.run_forever()
        assert ran == [1, 1]
    finally:
        loop.close()


def test_many_concurrent_sleepers_wake_in_deadline_order():
    delays_ms = [(i * 7919) % 1000 for i in range(500)]

    async def main():
        loop = asyncio.get_running_loop()
        woken = []

        async def sleeper(delay_ms):
            await asyncio.sleep(delay_ms / 1000)
            woken.append((loop.time_ns(), delay_ms))

        await asyncio.gather(*(sleeper(d) for d in delays_ms))
        return woken

    woken = run_virtual(main())
    assert [d for _, d in woken] == sorted(delays_ms)
    assert all(t_ns == d * 1_000_000 for t_ns, d in woken)


def test_cancelled_timers_do_not_move_the_clock():
    async def main():
        loop = asyncio.get_running_loop()
        handles = [loop.call_later(100.0 + i, lambda: None) for i in range(300)]
        for handle in handles:
            handle.cancel()
        await asyncio.sleep(1.0)
        return loop.time()

    assert run_virtual(main()) == 1.0


def test_real_threads_still_complete_on_the_virtual_loop():
    async def main():
        loop = asyncio.get_running_loop()
        value = await loop.run_in_executor(None, sum, range(10))
        return value, loop.time()

    # (Joining the executor's threads at the end does not time out on the virtual clock.)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert run_virtual(main()) == (45, 0.0)


def test_a_registered_reader_is_polled_before_virtual_time_moves_on():
    """With a file descriptor registered the selector is polled every iteration: data
    already waiting is read before the clock jumps to the next timer."""
    import socket

    async def main():
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        a.setblocking(False)
        read_at = []
        loop.add_reader(a.fileno(), lambda: (a.recv(16), read_at.append(loop.time())))
        b.send(b"x")
        for _ in range(100):  # more iterations than the idle poll interval
            await asyncio.sleep(1.0)
            if read_at:
                break
        loop.remove_reader(a.fileno())
        a.close()
        b.close()
        return read_at

    assert VirtualClock().run(main()) == [0.0]


def test_a_run_result_is_handed_back_without_being_repr_d():
    """A replay's result holds every request: building its repr (as the Runner's exit
    once did through the main task's repr) cost seconds on large runs."""

    class Result:
        reprs = 0

        def __repr__(self):
            Result.reprs += 1
            return "Result()"

    async def main():
        await asyncio.sleep(1.0)
        return Result()

    result = VirtualClock().run(main())
    assert isinstance(result, Result) and Result.reprs == 0


def test_nan_delay_is_refused():
    # (From Python 3.13 asyncio.sleep refuses NaN itself, "Invalid delay: NaN", before the
    # loop sees it; the loop's own refusal is tested below, on every version.)
    async def main():
        await asyncio.sleep(math.nan)

    with pytest.raises(ValueError, match="(?i)nan"):
        run_virtual(main())


@pytest.mark.parametrize("delay", [math.nan, math.inf, -math.inf, np.float64("nan")])
def test_the_loop_refuses_a_timer_at_no_number(delay):
    async def main():
        asyncio.get_running_loop().call_later(delay, lambda: None)

    with pytest.raises(ValueError, match="(?i)nan|inf"):
        run_virtual(main())


def test_numpy_delays_round_to_the_nanoseconds_of_the_same_floats():
    rng = np.random.default_rng(4)
    delays = np.concatenate((rng.uniform(0, 1e-3, 300), rng.uniform(0, 1e6, 300),
                             (rng.integers(0, 10**6, 300) + 0.5) / 1e9))

    async def main():
        loop = asyncio.get_running_loop()
        pairs = [(loop.call_later(d, lambda: None), loop.call_later(float(d), lambda: None),
                  loop.call_at(d, lambda: None), loop.call_at(float(d), lambda: None))
                 for d in delays]
        for timers in pairs:
            for t in timers:
                t.cancel()
        return [(a._when_ns, b._when_ns, c._when_ns, e._when_ns) for a, b, c, e in pairs]

    for a, b, c, e in run_virtual(main()):
        assert a == b and c == e == a
    assert seconds_to_ns(np.float64(2.5e-9)) == seconds_to_ns(2.5e-9)
    with pytest.raises(ValueError, match="inf"):
        run_virtual(asyncio.sleep(np.float64(np.inf)))


def test_now_s_follows_the_clock_loop():
    clock = VirtualClock()
    with pytest.raises(RuntimeError, match="run"):
        clock.now_s()

    async def main():
        await asyncio.sleep(7.0)
        return clock.now_s()

    assert clock.run(main()) == 7.0
    assert isinstance(clock, Clock)


def test_each_run_starts_at_zero():
    clock = VirtualClock()

    async def main():
        await asyncio.sleep(3.0)
        return asyncio.get_running_loop().time()

    assert clock.run(main()) == clock.run(main()) == 3.0
    assert isinstance(clock.new_event_loop(), VirtualEventLoop)


@pytest.mark.parametrize("use_uvloop", [True, False])
def test_live_clock_scales_real_time(use_uvloop):
    clock = LiveClock(1000.0, use_uvloop=use_uvloop)

    async def main():
        loop = asyncio.get_running_loop()
        start_wall, start = time.monotonic(), loop.time()
        await asyncio.sleep(100.0)  # 0.1 wall s at speed 1000
        slept_wall, slept = time.monotonic() - start_wall, loop.time() - start
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.Event().wait(), timeout=200.0)
        return slept_wall, slept, loop.time() - start

    slept_wall, slept, total = clock.run(main())
    # Never early: a uvloop timer's 1 ms wall tick may round a wait down by up to 1 ms (1 s
    # of loop time at speed 1000). A busy machine only makes waits longer, so the upper
    # bound is a guard, a hundred times the wait, far below the 100 wall seconds an
    # unscaled sleep would take.
    assert 0.1 - 1e-3 <= slept_wall < 10.0
    assert slept >= 100.0 - 1.0 and total >= 300.0 - 2.0


@pytest.mark.parametrize("speed", [0, -1.0, math.nan, math.inf])
def test_live_clock_refuses_bad_speed(speed):
    with pytest.raises(ValueError, match=f"speed.*{speed!r}"):
        LiveClock(speed)


def test_make_clock_by_name():
    assert isinstance(make_clock("virtual"), VirtualClock)
    assert make_clock("live", speed=4.0).speed == 4.0
    with pytest.raises(ValueError, match="'wall'"):
        make_clock("wall")
