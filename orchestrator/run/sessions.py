"""Turning trace calls into worker requests, and running sessions closed-loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from traces.model import Call, Session
from traces.replay import LoadOptions
from workers.request import Request


@dataclass
class Pending:
    """A call waiting for admission, and the future its session awaits."""

    request: Request
    future: asyncio.Future
    interactive: bool


def writeback_blocks(call: Call, following: Call | None) -> tuple[int, ...]:
    """The blocks the next call of the session starts from, covering this call's input
    and output, when the next call extends this one (no reset in between)."""
    if following is None:
        return call.block_ids
    n = len(call.block_ids)
    if following.block_ids[:n] != call.block_ids:
        return call.block_ids
    covered = (call.input_tokens + call.output_tokens) // call.block_size
    return following.block_ids[:max(n, covered)]


def make_request(call_id: int, call: Call, following: Call | None) -> Request:
    return Request(call_id=call_id, session_id=call.session_id,
                   input_tokens=call.input_tokens, output_tokens=call.output_tokens,
                   block_ids=call.block_ids,
                   writeback_block_ids=writeback_blocks(call, following),
                   interactive=not call.is_subagent, own_cached_tokens=call.cached_tokens)


def wake_up(future: asyncio.Future) -> None:
    """A sleep's timer fired (asyncio.sleep's own callback: a cancelled sleep stays so)."""
    if not future.cancelled():
        future.set_result(None)


async def sleep_on(loop: asyncio.AbstractEventLoop, delay_s: float) -> None:
    """`asyncio.sleep(delay_s)` on `loop`, as given (asyncio.sleep asks for the running
    loop, a system call on Python 3.11), without cancelling its timer once it fired:
    the same timer and wake-up."""
    woken = loop.create_future()
    timer = loop.call_later(delay_s, wake_up, woken)
    try:
        await woken
    except asyncio.CancelledError:
        timer.cancel()
        raise


class Outcome:
    DONE = "done"
    REJECTED = "rejected"


async def run_session(session: Session, load: LoadOptions, next_call_id: Callable[[], int],
                      submit: Callable[[Request], Awaitable[str]]) -> int:
    """Issue each call its think gap after the previous answer; a refused call ends the
    session (the user gives up). Returns the number of calls issued."""
    calls = session.calls
    issued = 0
    loop = None  # the running loop, once a think gap needs it
    for i, call in enumerate(calls):
        if i:
            gap_s = load.think_s(call)
            if gap_s > 0:
                if loop is None:
                    loop = asyncio.get_running_loop()
                await sleep_on(loop, gap_s)
        following = calls[i + 1] if i + 1 < len(calls) else None
        issued += 1
        if await submit(make_request(next_call_id(), call, following)) == Outcome.REJECTED:
            break
    return issued
