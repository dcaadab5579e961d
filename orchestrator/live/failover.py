"""Re-dispatching a lost worker's calls, and bringing its workers back.

A lost fill worker's batches and queue go to the front of the queue of the
least loaded fill worker still accepting: a prefill restarts. A lost decode worker's requests keep the tokens of their completed
jumps and go back to the ready buffer, to be loaded by another decode worker
from the store (a decode resumes from its last blob). Calls with nowhere to go
wait here until a worker comes back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from costmodel.phase import Phase
from workers.request import Request
from workers.runtime import DECODING


class Failover:
    def __init__(self, orch, event: Callable[..., None]) -> None:
        self.orch, self._event = orch, event
        self.held: list[Request] = []  # fill work with no accepting fill worker
        # worker name -> (spec, the store name of its GPUs' HBM), until restored
        self._removed: dict[str, tuple[object, str]] = {}

    @property
    def runtime(self):
        return self.orch.runtime

    def evacuate(self, names: list[str]) -> int:
        """Take every call off these workers and re-dispatch it; returns how many."""
        rt = self.runtime
        fills: list[Request] = []
        decodes: list[Request] = []
        for name in names:
            worker = rt.fill_workers.get(name) or rt.decode_workers.get(name)
            if worker is None:
                continue
            accepting = worker.accepting
            reqs = worker.evacuate()
            (decodes if name in rt.decode_workers else fills).extend(reqs)
            if accepting:  # a worker being moved by the slow loop finishes its move
                self._removed[name] = (worker.spec, worker.hbm.holder)
                rt.remove_worker(name)
        now_s = asyncio.get_running_loop().time()
        self._requeue(fills, now_s)
        for req in decodes:
            rt.ready.put(req)
        moved = len(fills) + len(decodes)
        self.orch.counters["redispatched"] += moved
        return moved

    def restore(self, names: list[str]) -> None:
        """The workers of a restarted process serve again; held calls go to them."""
        for name in names:
            removed = self._removed.pop(name, None)
            if removed is not None:
                spec, hbm_holder = removed
                # The same GPUs: their HBM keeps its store name (a worker that came by a
                # move holds its first name's), and a reshaped slice keeps its own pricer.
                self.orch.reconfigurer.start_worker(spec, hbm_holder)
        self.release_held()

    def release_held(self) -> None:
        """Fill work held for want of a fill worker goes to one, if one accepts now."""
        if self.held and self._target() is not None:
            held, self.held = self.held, []
            self._requeue(held, asyncio.get_running_loop().time())

    def can_finish(self, coming_back: list[str]) -> bool:
        """Some fill worker and some decode worker serve now or will (a lost process
        that is started again, a worker on its way to a pool)."""
        rt = self.runtime
        if self.orch.reconfigurer.busy():
            return True
        back = [self._removed[n][0] for n in coming_back if n in self._removed]
        fills = any(w.accepting for w in rt.intake_workers()) or any(
            s.phase is not Phase.DECODE for s in back)
        decodes = any(w.accepting for w in rt.decode_workers.values()) or any(
            s.phase in DECODING for s in back)
        return fills and decodes

    def _requeue(self, reqs: list[Request], now_s: float) -> None:
        for req in reversed(reqs):  # each to a queue's front: the oldest ends up first
            worker = self._target()
            if worker is None:
                self.held.insert(0, req)
                continue
            worker.submit(req, now_s)
            worker.queue.remove(req)
            worker.queue.appendleft(req)

    def _target(self):
        open_ = [w for w in self.runtime.fill_workers.values() if w.accepting]
        if not open_:
            return None
        return min(open_, key=lambda w: (len(w.queue), w.name))
