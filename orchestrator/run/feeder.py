"""Sessions into the run: the `Orchestrator`'s (orchestrator.run.replay) part that
starts them.

`Feeder.feed` starts each session at its start time (`traces.replay.session_starts`)
from timer callbacks, not from a task that sleeps between starts (the same timers and
turns, no future, wake-up and task step a session): a session of several calls runs as
a task (`orchestrator.run.sessions.run_session`), and a one-call session (the open
loop's) has its call submitted by a callback where its task's first step would run, the
session ending with its call (the run calls `session_finished`). It counts the sessions finished for the progress bar and
waits for the last of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import numpy as np

from orchestrator.run.sessions import Pending, make_request, run_session
from traces.model import Session
from traces.replay import LoadOptions, session_starts
from traces.shared_prefix import SharedChains
from workers.request import Request


class Feeder:
    """Starts the sessions: a session's calls go to `submit` (awaited for the outcome),
    a one-call session's call to `arrive` (no future: the run calls `session_finished`
    when it ends). `first_session_s`, `last_session_s`: the span in which sessions were
    started; `sessions_run`: how many."""

    def __init__(self, *, sessions: Sequence[Session], load: LoadOptions,
                 shared_chains: SharedChains, next_call_id: Callable[[], int],
                 submit: Callable[[Request], Awaitable[str]],
                 arrive: Callable[[Request, None], Pending],
                 on_progress: Callable[[int, int], None] | None = None) -> None:
        self.sessions, self.load, self.shared_chains = sessions, load, shared_chains
        self._next_call_id, self._submit, self._arrive = next_call_id, submit, arrive
        self.on_progress = on_progress
        self.first_session_s = self.last_session_s = 0.0
        self.sessions_run = 0  # also when the run is stopped before they finish
        # Sessions ended, of how many (progress); one-call sessions still running, and the
        # future the feeder waits on for them once all have started (`feed`).
        self._sessions_finished = 0
        self._sessions_total = 0
        self._alone_left = 0
        self._alone_over: asyncio.Future | None = None

    async def feed(self, rng: np.random.Generator) -> None:
        loop = asyncio.get_running_loop()
        # The sessions' tasks in start order, less those that returned: the gather at the
        # end waits for the rest as it would for all (the last started is among them), and
        # a task that failed or was cancelled stays for it to raise.
        tasks: dict[asyncio.Task, None] = {}
        started = 0
        self._sessions_total = len(self.sessions) * self.load.repeat
        if self.load.max_sessions is not None:
            self._sessions_total = min(self._sessions_total, self.load.max_sessions)
        starts = iter(session_starts(self.sessions, self.load, rng, self.shared_chains))
        # Set once every session has started: the wait for them to end (a gather).
        fed = loop.create_future()
        # The timer of the next start, or the feeder's turn it woke (cancelled with the
        # feeder).
        waiting: list[asyncio.Handle | None] = [None]

        def on_finished(task: asyncio.Task) -> None:
            if not task.cancelled() and task.exception() is None:
                del tasks[task]
            self.session_finished(alone=False)

        def step(due: tuple | None = None) -> None:
            """The feeder's turn: the sessions due start, then a timer is set for the
            next one's start, as a sleep would be. `due`: the session a timer was set
            for, which starts as the feeder wakes (the clock rounds to nanoseconds)."""
            nonlocal started
            waiting[0] = None
            while True:
                if due is None:
                    due = next(starts, None)
                    if due is None:
                        break
                    if due[0] > loop.time():
                        waiting[0] = loop.call_later(due[0] - loop.time(), wake, due)
                        return
                session = due[1]
                due = None
                if len(session.calls) == 1:
                    # A one-call session (the open loop's): its call is submitted by a
                    # callback where its task's first step would run, and the session ends
                    # with the call (`session_finished`), without a task, its wake-up at
                    # the call's end and its done callback.
                    loop.call_soon(self._submit_alone, session)
                    self._alone_left += 1
                else:
                    task = loop.create_task(run_session(session, self.load,
                                                        self._next_call_id, self._submit))
                    task.add_done_callback(on_finished)
                    tasks[task] = None
                if not started:
                    self.first_session_s = loop.time()
                self.last_session_s = loop.time()
                started += 1
            if self.on_progress is not None:
                self.on_progress(self._sessions_finished, started)
            self._sessions_total = started
            self.sessions_run = started
            if self._alone_left:  # one-call sessions still running: done when the last ends
                self._alone_over = loop.create_future()
                fed.set_result(asyncio.gather(*tasks, self._alone_over))
            else:
                fed.set_result(asyncio.gather(*tasks))

        def wake(due: tuple) -> None:
            """A start's timer fired: the feeder's turn comes next, where a woken task's
            would (a sleep's timer wakes its task through the ready queue)."""
            waiting[0] = loop.call_soon(step, due)

        # Callbacks, not a task that sleeps between starts: the same timers and turns, no
        # future, wake-up and task step a session.
        step()
        try:
            gathered = await fed
        except asyncio.CancelledError:
            if waiting[0] is not None:
                waiting[0].cancel()
            if fed.done():
                fed.result().cancel()
            raise
        await gathered

    def session_finished(self, alone: bool) -> None:
        """A session ended (`alone`: a one-call session without a task): counted, and the
        progress told; the last one-call session's end ends the feeder's wait for them."""
        self._sessions_finished += 1
        if self.on_progress is not None:
            self.on_progress(self._sessions_finished, self._sessions_total)
        if alone:
            self._alone_left -= 1
            if not self._alone_left and self._alone_over is not None and not self._alone_over.done():
                self._alone_over.set_result(None)

    def _submit_alone(self, session: Session) -> None:
        """`run_session` of a one-call session, as its task's first step would run it: the
        call made and submitted; the session ends with its call (`_session_finished`)."""
        self._arrive(make_request(self._next_call_id(), session.calls[0], None), None)
