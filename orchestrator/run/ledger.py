"""The call ledger: calls issued, reconciled against calls that reached a final state.

The session side records every call it issues; the service side records every
call that reaches a final state (completed, rejected, cancelled). At the end of
a run the service says which calls it still holds (its queues, batches, ready
buffer, calls waiting for a worker), found by walking where calls can be, not
by subtraction. Whatever was issued and is neither final nor held was dropped:
`lost`. A call reported final twice is `final_twice`. Nothing here is zero by
construction: a dropped call shows as lost = 1.

`CallLedger` is pure (ids in, counts out); `LedgerListener` feeds it from a run's
listener events (on_submit, on_done, on_reject); `held_call_ids(orch)` walks an
orchestrator's runtime for the calls it holds.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
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

    def as_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("issued", "completed", "rejected", "cancelled",
                                             "in_flight", "lost", "final_twice",
                                             "unknown_final")}
        out["lost_call_ids"] = list(self.lost_ids[:20])  # the first few, to look for
        return out


class CallLedger:
    def __init__(self) -> None:
        self._issued: set[int] = set()
        self._final: dict[int, Final] = {}
        self._final_twice = 0
        self._unknown = 0

    def issue(self, call_id: int) -> None:
        if call_id in self._issued:
            raise ValueError(f"call {call_id} issued twice")
        self._issued.add(call_id)

    def finish(self, call_id: int, how: Final) -> None:
        if call_id in self._final:
            self._final_twice += 1
            return
        if call_id not in self._issued:
            self._unknown += 1
        self._final[call_id] = how

    def is_final(self, call_id: int) -> bool:
        return call_id in self._final

    def reconcile(self, held: Iterable[int]) -> LedgerReport:
        """Counts against the calls the service says it holds now. A held call that is
        final already (it finished after the walk) counts as final, not in flight."""
        open_ = self._issued - self._final.keys()
        held_open = open_.intersection(held)
        lost = sorted(open_ - held_open)
        by = {how: 0 for how in Final}
        for call_id, how in self._final.items():
            if call_id in self._issued:
                by[how] += 1
        return LedgerReport(issued=len(self._issued), completed=by[Final.COMPLETED],
                            rejected=by[Final.REJECTED], cancelled=by[Final.CANCELLED],
                            in_flight=len(held_open), lost=len(lost),
                            final_twice=self._final_twice, unknown_final=self._unknown,
                            lost_ids=tuple(lost))


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


def held_call_ids(orch, extra: Iterable = ()) -> set[int]:
    """The calls an orchestrator holds now: waiting for admission, in fill queues and
    steps, in the ready buffer, in decode batches and loads, and `extra` (requests held
    elsewhere, such as live mode's calls waiting for a fill worker to come back).

    An in-process fill worker's step in flight is a timer callback, not a structure:
    its calls are not found here (virtual mode needs the worker to expose them)."""
    ids = {p.request.call_id for p in orch.queue}
    rt = orch.runtime
    for worker in (*rt.fill_workers.values(), *rt.decode_workers.values()):
        ids.update(r.call_id for r in _worker_calls(worker))
    ids.update(r.call_id for r in getattr(rt.ready, "_items", ()))
    ids.update(r.call_id for r in extra)
    return ids
