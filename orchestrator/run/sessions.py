"""Turning trace calls into worker requests, and running sessions closed-loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from storage.blobs import KnownIds
from traces._blocks import output_block_ids
from traces.model import Call, Session
from traces.replay import LoadOptions
from workers.clock import sleep_on
from workers.request import Request


@dataclass
class Pending:
    """A call waiting for admission, and the future its session awaits (none for the
    call of a one-call session run without a task: `orchestrator.run.feeder`)."""

    request: Request
    future: asyncio.Future | None  # None: a one-call session's, which nobody awaits
    interactive: bool
    # The fill pool (phase) the router chose for it on arrival, for a controller that
    # caps admissions per pool (`queue_pools`); None otherwise.
    fill_pool: str | None = None


def writeback_blocks(call: Call, following: Call | None, call_id: int) -> tuple[int, ...]:
    """The blocks a retiring call writes: its input's and its output's full blocks.

    How many is the call's own business (its input and output lengths), never the
    trace's future. The trace has no ids for output tokens, so the output's blocks take
    the ids the session's next call gives those positions when it resends this call's
    input (it resends the answer too: the same content, the same blocks, as a service
    hashing the tokens it generated would find), and ids of the call's own otherwise
    (`traces._blocks.output_block_ids`: a compaction, a dip, a sub-agent's turn, the
    session's last call), which no later call asks for.
    """
    n = len(call.block_ids)
    covered = (call.input_tokens + call.output_tokens) // call.block_size
    if covered <= n:
        return call.block_ids
    named = call.block_ids
    whole = None  # the next call's input, when these are its first ids
    if following is not None and following.block_ids[:n] == named:
        named = following.block_ids[:covered]
        whole = following.block_ids
    if len(named) < covered:
        named += output_block_ids(call_id, len(named), covered)
        whole = None
    if following is None:
        # A session's last call (on open-loop traffic every call, with a short input:
        # comparing it costs what saying it would) says nothing of them.
        return named
    # What is known of them (they start with the input; maybe the next call's first
    # ids) saves the store's index comparing them again (`KnownIds`).
    return KnownIds.of(named, call.block_ids, whole)


def make_request(call_id: int, call: Call, following: Call | None) -> Request:
    return Request(call_id=call_id, session_id=call.session_id,
                   input_tokens=call.input_tokens, output_tokens=call.output_tokens,
                   block_ids=call.block_ids,
                   writeback_block_ids=writeback_blocks(call, following, call_id),
                   interactive=not call.is_subagent, own_cached_tokens=call.cached_tokens)


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
