"""A fill worker's queue, with the new tokens it holds kept as calls join and leave.

The router weighs each intake worker by the tokens its queued calls still bring (input
less cached prefix: `orchestrator.control.router`). Summed over the queue at every call
routed, that costs as much as the queue is long, and queues run to thousands of calls
when a cluster falls behind its load; kept here as calls join and leave, it costs the
same at any length. Tokens are integers: the running total is the sum, exactly. So is
whether a call is queued twice (a lost step's calls handed back to the front, live
mode), which a worker's plan checks at every step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

from workers.request import Request


class FillQueue:
    """The calls waiting at a fill or mixed worker, oldest first (the part of a deque's
    interface the workers use), and `queued_tokens`: the sum over them of
    `input_tokens - prefix_tokens`. A queued call's prefix changes through
    `set_prefix` only (its prefix is known once fetched)."""

    __slots__ = ("_count", "_items", "queued_tokens")

    def __init__(self, items: Iterable[Request] = ()) -> None:
        self._items: deque[Request] = deque()
        self._count: dict[int, int] = {}  # id(call) -> times queued
        self.queued_tokens = 0
        self.extend(items)

    @property
    def has_repeats(self) -> bool:
        """A call is queued more than once."""
        return len(self._count) != len(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._items)

    def __getitem__(self, i: int) -> Request:
        return self._items[i]

    def __contains__(self, req: object) -> bool:
        return req in self._items

    def __repr__(self) -> str:
        return f"FillQueue({list(self._items)!r})"

    def _joined(self, req: Request) -> None:
        count = self._count
        key = id(req)
        count[key] = count.get(key, 0) + 1
        self.queued_tokens += req.input_tokens - req.prefix_tokens

    def _left(self, req: Request) -> None:
        count = self._count
        key = id(req)
        n = count[key]
        if n == 1:
            del count[key]
        else:
            count[key] = n - 1
        self.queued_tokens -= req.input_tokens - req.prefix_tokens

    def append(self, req: Request) -> None:
        self._items.append(req)
        self._joined(req)

    def appendleft(self, req: Request) -> None:
        self._items.appendleft(req)
        self._joined(req)

    def extend(self, reqs: Iterable[Request]) -> None:
        for req in reqs:
            self.append(req)

    def extendleft(self, reqs: Iterable[Request]) -> None:
        for req in reqs:
            self.appendleft(req)

    def popleft(self) -> Request:
        req = self._items.popleft()
        self._left(req)
        return req

    def remove(self, req: Request) -> None:
        self._items.remove(req)
        self._left(req)

    def clear(self) -> None:
        self._items.clear()
        self._count.clear()
        self.queued_tokens = 0

    def set_prefix(self, req: Request, prefix_tokens: int) -> None:
        """`req.prefix_tokens = prefix_tokens` for a call queued here once."""
        self.queued_tokens += req.prefix_tokens - prefix_tokens
        req.prefix_tokens = prefix_tokens
