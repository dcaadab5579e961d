"""The ready buffer between fill and decode: KV written, waiting for a decode slot."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from workers.request import READY, Request


class ReadyBuffer:
    """FIFO of filled requests. Decode workers subscribe a wake-up callback and pull
    when they have room, so a burst of fills waits here, not inside a decode batch."""

    def __init__(self, name: str = "ready") -> None:
        self.name = name
        self._items: deque[Request] = deque()
        self._subscribers: list[Callable[[], None]] = []
        self.put_total = 0
        # Which subscriber to wake first for a request (None: in subscription order): the
        # decode worker that holds most of its KV, when KV stays resident (kv_policy).
        self.prefer: Callable[[Request], Callable[[], None] | None] | None = None

    def __len__(self) -> int:
        return len(self._items)

    @property
    def depth(self) -> int:
        return len(self._items)

    def subscribe(self, wake: Callable[[], None]) -> None:
        self._subscribers.append(wake)

    def unsubscribe(self, wake: Callable[[], None]) -> None:
        self._subscribers.remove(wake)

    def put(self, req: Request) -> None:
        req.state = READY
        self._items.append(req)
        self.put_total += 1
        first = self.prefer(req) if self.prefer is not None else None
        if first is not None:
            first()
        for wake in self._subscribers:
            if wake != first:
                wake()

    def peek(self) -> tuple[Request, ...]:
        return tuple(self._items)

    def take(self, reqs: list[Request]) -> None:
        """Remove these requests (a prefix of the FIFO chosen by a batch policy)."""
        for req in reqs:
            if self._items and self._items[0] is req:
                self._items.popleft()
            else:
                self._items.remove(req)
