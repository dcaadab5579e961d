"""The call ledger: calls issued, reconciled against calls that reached a final state.

The session side records every call it issues; the service side records every
call that reaches a final state (completed, rejected, cancelled). At the end of
a run the service says which calls it still holds (its queues, batches, ready
buffer, calls waiting for a worker), found by walking where calls can be, not
by subtraction. Whatever was issued and is neither final nor held was dropped:
`lost`. A call reported final twice is `final_twice`. Nothing here is zero by
construction: a dropped call shows as lost = 1.

In live mode the ledger also keeps its own count of the calls a lost worker process
moves (`move`): the calls its walk finds on the lost workers, each open call once. The
failover counts the calls it re-dispatches from what the workers hand back; the two
counts meet only if no call is handed back twice, final already, unknown, or held
somewhere else too (each of those is a bad move, counted apart).

`CallLedger` is pure (ids in, counts out); `LedgerListener` feeds it from a run's
listener events (on_submit, on_done, on_reject); `held_call_ids(orch)` walks an
orchestrator's runtime for the calls it holds, `calls_on(orch, names)` for the calls
some of its workers hold.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Set
from dataclasses import dataclass


class Final(enum.Enum):
    COMPLETED = "completed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"  # withdrawn by the service before it ran to its end


@dataclass(frozen=True)
class LedgerReport:
    issued: int
    completed: int
    rejected: int
    cancelled: int
    in_flight: int  # held by the service, found where calls wait or run
    lost: int  # issued, never final, held nowhere
    final_twice: int  # a call reported final more than once
    unknown_final: int  # reported final, never issued
    lost_ids: tuple[int, ...] = ()
    moved: int = 0  # calls found on lost workers, open and held nowhere else (live mode)
    bad_moves: int = 0  # found there twice, final, never issued, or held elsewhere too

    def as_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("issued", "completed", "rejected", "cancelled",
                                             "in_flight", "lost", "final_twice",
                                             "unknown_final")}
        out["lost_call_ids"] = list(self.lost_ids[:20])  # the first few, to look for
        return out


class CallLedger:
    """Calls issued and their final states, in memory that stays small over a long run:
    the calls still open are a set (the calls in flight), calls that reached a final state
    a bit each (call ids are small integers handed out in order; ids beyond the bitmap's
    reach fall back to a set), and the finals counted by kind."""

    _BITMAP_IDS = 1 << 28  # 32 MB of bitmap at most

    def __init__(self) -> None:
        self._open: set[int] = set()
        self._issued = 0
        self._final_bits = bytearray()
        self._final_far: set[int] = set()
        self._by: dict[Final, int] = dict.fromkeys(Final, 0)
        self._final_twice = 0
        self._unknown: dict[int, Final] = {}  # final, never issued (yet)
        self._moved: dict[int, int] = {}  # call -> times a loss moved it (live mode)
        self._bad_moves = 0

    def _is_marked(self, call_id: int) -> bool:
        if 0 <= call_id < self._BITMAP_IDS:
            byte = call_id >> 3
            return byte < len(self._final_bits) and bool(self._final_bits[byte]
                                                         & (1 << (call_id & 7)))
        return call_id in self._final_far

    def _mark(self, call_id: int) -> None:
        if 0 <= call_id < self._BITMAP_IDS:
            byte = call_id >> 3
            if byte >= len(self._final_bits):
                self._final_bits.extend(bytes(max(byte + 1 - len(self._final_bits),
                                                  len(self._final_bits))))
            self._final_bits[byte] |= 1 << (call_id & 7)
        else:
            self._final_far.add(call_id)

    def issue(self, call_id: int) -> None:
        how = self._unknown.pop(call_id, None)
        if how is not None:  # its final state was reported first
            self._issued += 1
            self._by[how] += 1
            return
        if call_id in self._open or self._is_marked(call_id):
            raise ValueError(f"call {call_id} issued twice")
        self._open.add(call_id)
        self._issued += 1

    def finish(self, call_id: int, how: Final) -> None:
        if call_id in self._open:
            self._open.remove(call_id)
            self._by[how] += 1
        elif self._is_marked(call_id):
            self._final_twice += 1
            return
        else:
            self._unknown[call_id] = how
        self._mark(call_id)

    def is_final(self, call_id: int) -> bool:
        return self._is_marked(call_id)

    def move(self, found: Iterable[int], elsewhere: Set[int]) -> int:
        """A loss takes calls off its workers: `found` are the calls a walk found on them,
        each as often as found, `elsewhere` the calls held anywhere else. Each open call
        found once and held nowhere else is moved; any other is a bad move (found twice,
        final already, never issued, or held elsewhere too). Returns the calls moved."""
        seen: set[int] = set()
        moved = 0
        for call_id in found:
            if call_id in seen or call_id not in self._open or call_id in elsewhere:
                self._bad_moves += 1
            else:
                self._moved[call_id] = self._moved.get(call_id, 0) + 1
                moved += 1
            seen.add(call_id)
        return moved

    def times_moved(self, call_id: int) -> int:
        return self._moved.get(call_id, 0)

    def reconcile(self, held: Iterable[int]) -> LedgerReport:
        """Counts against the calls the service says it holds now. A held call that is
        final already (it finished after the walk) counts as final, not in flight."""
        held_open = self._open.intersection(held)
        lost = sorted(self._open - held_open)
        return LedgerReport(issued=self._issued, completed=self._by[Final.COMPLETED],
                            rejected=self._by[Final.REJECTED],
                            cancelled=self._by[Final.CANCELLED],
                            in_flight=len(held_open), lost=len(lost),
                            final_twice=self._final_twice, unknown_final=len(self._unknown),
                            lost_ids=tuple(lost), moved=sum(self._moved.values()),
                            bad_moves=self._bad_moves)


class LedgerListener:
    """A run listener that keeps a CallLedger: submitted calls are issued, done and
    rejected calls final."""

    def __init__(self, ledger: CallLedger | None = None) -> None:
        self.ledger = ledger or CallLedger()

    def on_submit(self, orch, req, now_s: float) -> None:
        self.ledger.issue(req.call_id)

    def on_done(self, orch, req, now_s: float) -> None:
        self.ledger.finish(req.call_id, Final.COMPLETED)

    def on_reject(self, orch, req, now_s: float) -> None:
        self.ledger.finish(req.call_id, Final.REJECTED)


def _worker_calls(worker) -> Iterable:
    yield from getattr(worker, "queue", ())
    held = getattr(worker, "_held", None)  # a decode (or mixed) worker's batch and loads
    if held is not None:
        yield from held()
    for batch in getattr(worker, "_steps", {}).values():  # an executed fill worker's steps
        yield from batch
    yield from getattr(worker, "loading_step", ())  # a fill step waiting for its prefixes


def held_call_ids(orch, extra: Iterable = (), skip: Set[str] = frozenset()) -> set[int]:
    """The calls an orchestrator holds now: waiting for admission, in fill queues and
    steps, in the ready buffer, in decode batches and loads, and `extra` (requests held
    elsewhere, such as live mode's calls waiting for a fill worker to come back); the
    workers named in `skip` are not walked.
    Fill workers keep their steps in flight in `_steps` (in process and on an executor)."""
    ids = {p.request.call_id for p in orch.queue}
    rt = orch.runtime
    for worker in (*rt.fill_workers.values(), *rt.decode_workers.values()):
        if worker.name not in skip:
            ids.update(r.call_id for r in _worker_calls(worker))
    ids.update(r.call_id for r in getattr(rt.ready, "_items", ()))
    ids.update(r.call_id for r in extra)
    return ids


def calls_on(orch, names: Iterable[str]) -> list[int]:
    """The calls these workers of an orchestrator hold now, each as often as it is found
    (a call found twice is a fault the ledger counts); names it has no worker of are
    skipped (a worker lost before and not back yet)."""
    rt = orch.runtime
    out: list[int] = []
    for name in names:
        worker = rt.fill_workers.get(name) or rt.decode_workers.get(name)
        if worker is not None:
            out.extend(r.call_id for r in _worker_calls(worker))
    return out
