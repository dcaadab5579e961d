"""Decode workers: continuous batching, advancing many tokens per event.

While the batch does not change, the worker prices the whole run of steps up to
the next retirement as one vector (the step time grows with context, so the run
integrates it) and waits once. A request joining or a controller changing the
target batch interrupts the run at the end of the step in progress.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np

from storage.store import BlobStore
from storage.tiers import Location, Tier
from workers.batching import plan_decode_admission
from workers.cluster import WorkerSpec
from workers.events import EventLog
from workers.kv_io import FetchResult, fetch, release_fetch, write_and_offload
from workers.pricing import StepPricer
from workers.ready import ReadyBuffer
from workers.request import Request, RequestState
from workers.state import WorkerState


class DecodeWorker:
    def __init__(self, spec: WorkerSpec, pricer: StepPricer, store: BlobStore,
                 ready: ReadyBuffer, log: EventLog,
                 on_done: Callable[[Request, float], None] | None = None, jump: bool = True):
        self.spec, self.pricer, self.store, self.ready, self.log = spec, pricer, store, ready, log
        self.on_done = on_done
        self.jump = jump
        self.hbm = Location(Tier.HBM, spec.name)
        self.host = Location(Tier.DRAM, spec.node)
        # The pool's target is per attention rank per micro-batch; the worker holds all.
        self.slots_per_unit = pricer.attention_ranks * spec.layout.pp
        self.target_batch = spec.batch.target_batch * self.slots_per_unit
        self.running: list[Request] = []
        self._loading: dict[int, Request] = {}  # KV on its way into HBM
        self._fetches: dict[int, FetchResult] = {}  # pinned prefixes, until retirement
        self._loaded: list[Request] = []
        self._tokens_done = 0
        self._busy_s = 0.0
        self._interrupt: asyncio.Event | None = None
        self.accepting = True
        ready.subscribe(self._on_ready)

    @property
    def name(self) -> str:
        return self.spec.name

    def _reserved_bytes(self) -> float:
        reqs = [*self.running, *self._loading.values(), *self._loaded]
        return sum(self.pricer.kv_bytes(r.input_tokens + r.output_tokens) for r in reqs)

    def _occupied(self) -> int:
        return len(self.running) + len(self._loading) + len(self._loaded)

    def state(self) -> WorkerState:
        kv = sum(self.pricer.kv_bytes(r.context_tokens) for r in self.running)
        return WorkerState(
            name=self.name, pool=self.spec.pool, phase="decode",
            queue_depth=len(self._loading) + len(self._loaded), running=len(self.running),
            kv_resident_bytes=kv, kv_capacity_bytes=float(self.spec.kv_capacity_bytes),
            tokens_done=self._tokens_done, busy_s=self._busy_s,
            target_batch=self.target_batch, accepting=self.accepting)

    def set_target_batch(self, sequences: int) -> None:
        """A controller's intervention: takes effect at the end of the current step."""
        self.target_batch = max(1, int(sequences))
        self._poke()

    def _poke(self) -> None:
        if self._interrupt is not None:
            self._interrupt.set()

    def _on_ready(self) -> None:
        # Start loading at once; the running batch is interrupted only when KV arrives.
        if self.accepting and self._interrupt is not None and self._occupied() < self.target_batch:
            self._admit(asyncio.get_running_loop().time())

    def _admit(self, now_s: float) -> None:
        if not self.accepting or not len(self.ready):
            return
        joined = plan_decode_admission(
            self._occupied(), self._reserved_bytes(), self.ready.peek(), self.spec.batch,
            self.spec.kv_capacity_bytes,
            lambda r: self.pricer.kv_bytes(r.input_tokens + r.output_tokens),
            target_batch=self.target_batch)
        if not joined:
            return
        self.ready.take(joined)
        loop = asyncio.get_running_loop()
        for req in joined:
            result = fetch(self.store, req.block_ids, self.hbm, now_s, None)
            req.state = RequestState.LOADING
            req.decode_worker = self.name
            self._loading[req.call_id] = req
            self._fetches[req.call_id] = result
            self.log.add(now_s, self.name, "load", req.call_id)
            loop.call_at(now_s + result.transfer_s, self._on_loaded, req.call_id)

    def _on_loaded(self, call_id: int) -> None:
        self._loaded.append(self._loading.pop(call_id))
        self._poke()

    def _join(self, now_s: float) -> None:
        for req in self._loaded:
            req.state = RequestState.DECODING
            req.decode_start_s = now_s
            self.running.append(req)
            self.log.add(now_s, self.name, "join", req.call_id)
        self._loaded.clear()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._interrupt = asyncio.Event()
        while True:
            now_s = loop.time()
            self._admit(now_s)
            self._join(now_s)
            self._interrupt.clear()
            if not self.running:
                await self._interrupt.wait()
                continue
            steps = min(r.remaining for r in self.running) if self.jump else 1
            mean_context = sum(r.context_tokens for r in self.running) / len(self.running)
            ends = now_s + np.cumsum(self.pricer.decode_steps_s(len(self.running), mean_context,
                                                                steps))
            done = await self._run_steps(ends)
            self._advance(done, now_s, loop.time())

    async def _run_steps(self, ends: np.ndarray) -> int:
        """Wait through priced steps ending at `ends`; return how many ran. An interrupt
        ends the run at the end of the step in progress, unless nothing needs the batch
        to change (a spurious wake), in which case the run goes on unpriced again."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                await asyncio.wait_for(self._interrupt.wait(), timeout=ends[-1] - loop.time())
            except TimeoutError:
                return len(ends)
            t = loop.time()
            j = min(int(np.searchsorted(ends, t, side="left")), len(ends) - 1)
            if ends[j] > t:
                await asyncio.sleep(ends[j] - t)
            if self._loaded or self.target_batch < len(self.running) or j == len(ends) - 1:
                return j + 1
            self._interrupt.clear()

    def _advance(self, steps: int, start_s: float, now_s: float) -> None:
        self._busy_s += now_s - start_s
        self._tokens_done += steps * len(self.running)
        still: list[Request] = []
        for req in self.running:
            req.generated += steps
            if req.remaining > 0:
                still.append(req)
                continue
            self._retire(req, now_s)
        self.running = still

    def _retire(self, req: Request, now_s: float) -> None:
        release_fetch(self.store, self.hbm, self._fetches.pop(req.call_id))
        blocks = req.writeback_block_ids or req.block_ids
        req.kv_chain = write_and_offload(self.store, req.session_id, blocks, self.hbm,
                                         self.host, now_s)
        req.state = RequestState.DONE
        req.done_s = now_s
        self.log.add(now_s, self.name, "done", req.call_id)
        if self.on_done is not None:
            self.on_done(req, now_s)
