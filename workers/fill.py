"""Prefill and midfill workers: token batches in, KV blobs and ready requests out."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from costmodel.phase import Phase
from storage.store import BlobStore
from storage.tiers import Location, Tier
from workers.batching import plan_fill_batch
from workers.cluster import WorkerSpec
from workers.events import EventLog
from workers.kv_io import FetchResult, fetch, release_fetch, write_and_offload
from workers.pricing import StepPricer
from workers.ready import ReadyBuffer
from workers.request import Request, RequestState
from workers.state import WorkerState


class FillWorker:
    """Each step: plan a batch -> fetch cached prefixes -> price the batch with the cost
    core -> wait on the clock -> write the new KV, offload it, hand the requests on.

    Requests that need no decode (one output token or none) finish here."""

    def __init__(self, spec: WorkerSpec, pricer: StepPricer, store: BlobStore,
                 ready: ReadyBuffer, log: EventLog,
                 on_done: Callable[[Request, float], None] | None = None):
        self.spec, self.pricer, self.store, self.ready, self.log = spec, pricer, store, ready, log
        self.on_done = on_done
        self.hbm = Location(Tier.HBM, spec.name)
        self.host = Location(Tier.DRAM, spec.node)
        self.queue: deque[Request] = deque()
        self._fetched: dict[int, FetchResult] = {}
        self._in_flight = 0
        self._tokens_done = 0
        self._busy_s = 0.0
        self._wake: asyncio.Event | None = None
        self.accepting = True

    @property
    def name(self) -> str:
        return self.spec.name

    def submit(self, req: Request, now_s: float) -> None:
        req.state = RequestState.QUEUED
        req.fill_worker = self.name
        self.queue.append(req)
        self.log.add(now_s, self.name, "queued", req.call_id)
        if self._wake is not None:
            self._wake.set()

    def state(self) -> WorkerState:
        return WorkerState(
            name=self.name, pool=self.spec.pool, phase=self.spec.phase.name.lower(),
            queue_depth=len(self.queue), running=self._in_flight,
            kv_resident_bytes=0.0, kv_capacity_bytes=float(self.spec.kv_capacity_bytes),
            tokens_done=self._tokens_done, busy_s=self._busy_s,
            target_batch=self.spec.batch.max_batch_sequences, accepting=self.accepting)

    def _prepare(self, now_s: float) -> list[Request]:
        """Fetch prefixes for the queue's head until the batch policy is satisfied."""
        batch: list[Request] = []
        for req in list(self.queue):
            if req.call_id not in self._fetched:
                result = fetch(self.store, req.block_ids, self.hbm, now_s, self.pricer.recompute_s)
                self._fetched[req.call_id] = result
                req.prefix_tokens = result.prefix_tokens - result.recompute_tokens
            candidate = plan_fill_batch([*batch, req], self.spec.batch)
            if len(candidate) <= len(batch):
                break
            batch = candidate
        return batch

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        while True:
            if not self.queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            now_s = loop.time()
            batch = self._prepare(now_s)
            for req in batch:
                self.queue.popleft() if self.queue[0] is req else self.queue.remove(req)
                req.state = RequestState.FILLING
                req.fill_start_s = now_s
                req.computed_tokens = req.input_tokens - req.prefix_tokens
            transfer_s = max(self._fetched[r.call_id].transfer_s for r in batch)
            n = len(batch)
            mean_new = sum(r.computed_tokens for r in batch) / n
            mean_cached = sum(r.prefix_tokens for r in batch) / n
            phase = Phase.MIDFILL if self.spec.phase is Phase.MIDFILL else Phase.PREFILL
            latency_s, occupancy_s = self.pricer.fill_s(phase, n, max(mean_new, 1.0), mean_cached)
            self.log.add(now_s, self.name, "fill_start", *(r.call_id for r in batch))
            self._in_flight += n
            self._start_step(batch, loop.time() + transfer_s + latency_s)
            self._busy_s += transfer_s + occupancy_s
            await asyncio.sleep(transfer_s + occupancy_s)

    def _start_step(self, batch: list[Request], end_s: float) -> None:
        """The batch's step ends at `end_s` on the run's clock (workers.executor runs it
        on another process instead)."""
        asyncio.get_running_loop().call_at(end_s, self._complete, batch)

    def _complete(self, batch: list[Request]) -> None:
        now_s = asyncio.get_running_loop().time()
        self._in_flight -= len(batch)
        for req in batch:
            release_fetch(self.store, self.hbm, self._fetched.pop(req.call_id))
            req.kv_chain = write_and_offload(self.store, req.session_id, req.block_ids,
                                             self.hbm, self.host, now_s)
            self._tokens_done += req.computed_tokens
            req.fill_end_s = now_s
            if req.output_tokens >= 1:
                req.first_token_s = now_s  # the fill's last logits give the first token
                req.generated = 1
            self.log.add(now_s, self.name, "fill_done", req.call_id)
            if req.remaining <= 0:
                req.state = RequestState.DONE
                req.done_s = now_s
                if self.on_done is not None:
                    self.on_done(req, now_s)
            else:
                self.ready.put(req)
