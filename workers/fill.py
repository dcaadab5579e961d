"""Prefill and midfill workers: chunked token steps in, KV blobs and ready requests out.

A worker takes a token budget per step (`max_batch_tokens`, the chunk size). A
long prompt is split over several steps, each chunk's attention seeing the
cached prefix plus the earlier chunks; several requests share a step up to the
budget (Sarathi-Serve, https://arxiv.org/abs/2403.02310; vLLM chunked prefill;
SGLang `--chunked-prefill-size`). A request's fill ends when its last chunk's
step does. Each step is priced request by request (`costmodel.batch`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from storage.store import BlobStore
from storage.tiers import Location, Tier
from workers.batching import FillChunk, next_fill_chunk
from workers.clock import sleep_on
from workers.cluster import BatchPolicySpec, WorkerSpec
from workers.cost_source import CostSource
from workers.events import EventLog
from workers.fill_queue import FillQueue
from workers.kv_io import (
    FetchResult,
    Handoff,
    fetch,
    handoff_fetched,
    promote_hot,
    release_fetch,
    release_handoff,
)
from workers.kv_policy import DEFAULT_KV_POLICY, KVPolicy, finish_call
from workers.ready import ReadyBuffer
from workers.request import DECODE_WAIT, FILL, FILLING, QUEUED, Request
from workers.state import StateMemo, WorkerState

# The run's clock keeps integer nanoseconds (workers.clock): a timer set for a float time
# may fire up to a tick before it, which must count as on time.
CLOCK_TICK_S = 1e-9


class ChunkedFills:
    """A worker's fill work: requests waiting or part-filled (`queue`, oldest first),
    their prefixes fetched into HBM (`fetched`, in HBM from `loaded_at`) and the tokens
    of each already put in steps (`planned`). Plans the chunks of the next step. A
    request is out of `queue` while a chunk of it runs (so a step handed back whole
    holds each of its requests once); after a chunk that was not its last it goes back
    to the queue's front (`resume`)."""

    def __init__(self, store: BlobStore, recompute_s: Callable[[int], float] | None,
                 policy: BatchPolicySpec, ranks: int = 1):
        self.store, self.recompute_s, self.policy = store, recompute_s, policy
        # Attention data-parallel ranks: a step's chunk k runs on rank k mod `ranks`
        # (`costmodel.batch.placed`), each rank within its share of the step's token
        # budget, as SGLang's per-rank schedulers are (with DP attention its
        # `chunked_prefill_size` is divided by `dp_size`: python/sglang/srt/server_args.py).
        self.ranks = ranks
        # Set by the runtime: the rack cache hot prefixes are promoted to, and how many
        # live sessions make a blob hot (workers.kv_io.promote_hot); `on_loaded()` when a
        # prefix's copies on the links are done.
        self.rack: Location | None = None
        self.promote_min_sessions = 0
        self.on_loaded: Callable[[], None] | None = None
        self.queue = FillQueue()  # with the new tokens it holds (the router weighs them)
        self.fetched: dict[int, FetchResult] = {}
        self.planned: dict[int, int] = {}
        self.loaded_at: dict[int, float] = {}

    def prepare(self, hbm: Location, now_s: float, budget_tokens: int | None = None,
                may_start: Callable[[Request, list[Request]], bool] | None = None,
                skip_loading: bool = False) -> list[FillChunk]:
        """The next step's chunks; fetches the prefixes of the queue's head as far as
        the plan reaches. `may_start(req, starting)`: whether a request whose fill has
        not begun may begin now beside `starting` (a mixed worker's room); the queue
        stays in order, so the first refused request ends the plan. `skip_loading`: a
        request whose prefix is still on its way waits for a later step instead of
        holding this one (its fill starts with the load)."""
        queue = self.queue
        if not queue:
            return []
        if queue.has_repeats:
            # A lost step's requests were handed back to the queue's front (live mode).
            unique = list(dict.fromkeys(queue))
            queue.clear()
            queue.extend(unique)
        chunks: list[FillChunk] = []
        starting: list[Request] = []
        # The plan grows a request at a time, as `plan_fill_batch` over the requests so far
        # plans it: each request planned takes a chunk, else the plan ends.
        budget = self.policy.max_batch_tokens if budget_tokens is None else budget_tokens
        ranks = self.ranks
        rank_budget = [budget // ranks] * ranks if ranks > 1 else None
        # Over the queue itself, not a copy of it: nothing here adds or removes a call,
        # and a plan reaches a step's worth of calls into a queue of any length.
        for req in queue:
            fresh = not self.planned.get(req.call_id, 0)
            if fresh and may_start is not None and not may_start(req, starting):
                break
            if req.call_id not in self.fetched:
                result = self._fetch(req, hbm, now_s)
                self.planned.pop(req.call_id, None)  # a fresh start
                queue.set_prefix(req, result.prefix_tokens - result.recompute_tokens)
                if skip_loading and self.loaded_at[req.call_id] > now_s:
                    self._start(req, now_s)
            if skip_loading and self.loaded_at[req.call_id] > now_s + CLOCK_TICK_S:
                continue
            if budget <= 0 or len(chunks) >= self.policy.max_batch_sequences:
                break
            if rank_budget is None:
                chunk = next_fill_chunk(req, self.planned, budget)
            else:
                rank = len(chunks) % ranks
                if rank_budget[rank] <= 0:
                    break
                chunk = next_fill_chunk(req, self.planned, rank_budget[rank])
                if chunk is not None:
                    rank_budget[rank] -= chunk.tokens
            if chunk is None:
                break
            budget -= chunk.tokens
            if fresh:
                starting.append(req)
            chunks.append(chunk)
        return chunks

    def _fetch(self, req: Request, hbm: Location, now_s: float) -> FetchResult:
        """Fetch its prefix into `hbm`: in HBM from `loaded_at` (inf until the copies on
        the links are done); hot shared blobs go to the rack cache besides."""
        result = fetch(self.store, req.block_ids, hbm, now_s, self.recompute_s)
        self.fetched[req.call_id] = result
        if result.transfer is None:
            self.loaded_at[req.call_id] = now_s + result.transfer_s
        else:
            self.loaded_at[req.call_id] = math.inf
            result.transfer.add_done_callback(
                lambda end_s, call_id=req.call_id: self._loaded(call_id, end_s))
        if self.rack is not None:
            promote_hot(self.store, result.pinned, self.rack, self.promote_min_sessions, now_s)
        return result

    def _loaded(self, call_id: int, end_s: float) -> None:
        """A prefix's copies are done (its request may be gone: released, evacuated)."""
        if call_id in self.loaded_at:
            self.loaded_at[call_id] = end_s
            if self.on_loaded is not None:
                self.on_loaded()

    async def loaded(self, reqs: list[Request]) -> None:
        """Wait until the prefixes of `reqs` are in HBM."""
        for req in reqs:
            result = self.fetched.get(req.call_id)
            if result is not None and result.transfer is not None and not result.transfer.done:
                await result.transfer.wait()

    def begin(self, chunks: list[FillChunk], now_s: float) -> tuple[float, list[Request]]:
        """Put `chunks` in a step starting at `now_s`. Returns the wait for the prefixes
        of the requests whose fill starts with it (inf while copies on the links are on
        their way: `loaded` waits for them), and those requests."""
        starting: list[Request] = []
        for c in chunks:
            req = c.request
            if not self.planned.get(req.call_id, 0):
                starting.append(req)
                self._start(req, now_s)
            self.planned[req.call_id] = self.planned.get(req.call_id, 0) + c.tokens
            self.queue.popleft() if self.queue[0] is req else self.queue.remove(req)
        transfer_s = max((self.loaded_at[r.call_id] - now_s for r in starting), default=0.0)
        return max(transfer_s, 0.0), starting

    @staticmethod
    def _start(req: Request, now_s: float) -> None:
        """The request's fill starts now (or started with its prefix's load)."""
        req.state = FILLING
        if req.fill_start_s is None:
            req.fill_start_s = now_s
        req.enter(FILL, now_s)
        req.computed_tokens = req.input_tokens - req.prefix_tokens

    def next_load_s(self, now_s: float) -> float | None:
        """When the next prefix still on its way reaches HBM, or None."""
        if not self.loaded_at:
            return None
        times = [t for t in self.loaded_at.values() if now_s + CLOCK_TICK_S < t < math.inf]
        return min(times) if times else None

    def resume(self, chunks: tuple[FillChunk, ...] | list[FillChunk]) -> None:
        """A step ended: the requests it left part-filled go back to the queue's front,
        in their order."""
        for c in reversed(chunks):
            if not c.last and self.current(c.request):
                self.queue.appendleft(c.request)

    def current(self, req: Request) -> bool:
        """False for a chunk of a step lost and handed back (its fetch was released)."""
        return req.call_id in self.fetched

    def end(self, req: Request) -> FetchResult:
        """The request's fill is over: forget it; the caller releases the fetch."""
        self.planned.pop(req.call_id, None)
        self.loaded_at.pop(req.call_id, None)
        return self.fetched.pop(req.call_id)


class FillStep(list):
    """The requests of one step (what an executor runs and may hand back), with their
    chunks."""

    def __init__(self, chunks: list[FillChunk]):
        super().__init__(c.request for c in chunks)
        self.chunks = tuple(chunks)


class FillWorker:
    """Each step: plan the chunks -> fetch cached prefixes -> price the step with the
    cost core -> wait on the clock -> for requests whose last chunk ran, write the new
    KV, offload it, hand them on.

    Requests that need no decode (one output token or none) finish here."""

    kv_policy: KVPolicy = DEFAULT_KV_POLICY  # where a call's KV goes when its fill ends
    # A call going on to decode keeps its KV pinned here for its decode worker to copy GPU
    # to GPU (`workers.kv_io.Handoff`), when the cluster says so and KV leaves HBM after
    # a call (offload); else it goes through host memory (or stays resident: retain).
    direct_handoff = False

    def __init__(self, spec: WorkerSpec, pricer: CostSource, store: BlobStore,
                 ready: ReadyBuffer, log: EventLog,
                 on_done: Callable[[Request, float], None] | None = None):
        self.spec, self.pricer, self.store, self.ready, self.log = spec, pricer, store, ready, log
        self.name = spec.name  # read at every sample (the HBM figures)
        self.on_done = on_done
        self.hbm = Location(Tier.HBM, spec.name)
        self.host = Location(Tier.DRAM, spec.node)
        self.fills = ChunkedFills(store, pricer.recompute_s, spec.batch,
                                  pricer.attention_ranks)
        # The same objects under the names the executor (workers.executor) works on.
        self.queue, self._fetched = self.fills.queue, self.fills.fetched
        self._in_flight = 0
        # Steps running, their calls findable by the call ledger (orchestrator.run.ledger).
        self._steps: dict = {}
        self.loading_step: FillStep | tuple = ()  # a step waiting for its prefixes
        self._handoffs: list[Handoff] = []  # KV held for decode workers to copy
        self._tokens_done = 0
        self._busy_s = 0.0
        self._wake: asyncio.Event | None = None
        # The loop `run` runs on, kept: asyncio.get_running_loop makes a system call (getpid).
        self._loop: asyncio.AbstractEventLoop | None = None
        self.accepting = True
        self._states = StateMemo()

    def submit(self, req: Request, now_s: float) -> None:
        req.state = QUEUED
        req.fill_worker = self.name
        self.queue.append(req)
        self.log.add(now_s, self.name, "queued", req.call_id)
        if self._wake is not None:
            self._wake.set()

    def state(self) -> WorkerState:
        key = (len(self.queue), self._in_flight, self._tokens_done, self._busy_s, self.accepting)
        last = self._states.last(key)
        if last is not None:
            return last
        spec = self.spec
        return self._states.keep(key, WorkerState(
            name=self.name, pool=spec.pool, phase=spec.phase.name.lower(),
            queue_depth=key[0], running=key[1], kv_resident_bytes=0.0,
            kv_capacity_bytes=float(spec.kv_capacity_bytes), tokens_done=key[2],
            busy_s=key[3], target_batch=spec.batch.max_batch_sequences, accepting=key[4]))

    async def run(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        while True:
            if not self.queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            now_s = loop.time()
            chunks = self.fills.prepare(self.hbm, now_s)
            transfer_s, starting = self.fills.begin(chunks, now_s)
            if starting:
                self.log.add(now_s, self.name, "fill_start", *(r.call_id for r in starting))
            self._in_flight += len(chunks)
            if transfer_s == math.inf:
                # Their prefixes are on the links: the step waits for them (its calls
                # are running, and held in `loading_step` meanwhile).
                step = self.loading_step = FillStep(chunks)
                await self.fills.loaded(starting)
                if self.loading_step is not step:  # evacuated meanwhile (workers.executor)
                    continue
                self.loading_step = ()
                self._busy_s += loop.time() - now_s
                transfer_s = 0.0
            else:
                step = FillStep(chunks)
            latency_s, occupancy_s = self.pricer.fill_step_s(
                [c.tokens for c in chunks], [c.cached_tokens for c in chunks])
            self._start_step(step, loop.time() + transfer_s + latency_s)
            self._busy_s += transfer_s + occupancy_s
            await sleep_on(loop, transfer_s + occupancy_s)

    def release_handoffs(self, now_s: float) -> None:
        """The worker stops: the KV it still holds for decode workers goes to host
        memory (they load it from there)."""
        for handoff in self._handoffs:
            release_handoff(self.store, handoff, now_s)
        self._handoffs = []

    def _start_step(self, batch: FillStep, end_s: float) -> None:
        """The step ends at `end_s` on the run's clock (workers.executor runs it on
        another process instead)."""
        self._steps[id(batch)] = batch
        self._loop.call_at(end_s, self._complete, batch)

    def _complete(self, batch: FillStep) -> None:
        self._steps.pop(id(batch), None)
        now_s = self._loop.time()
        self._in_flight -= len(batch)
        self.fills.resume(batch.chunks)
        if self.queue and self._wake is not None:
            self._wake.set()  # a part-filled request is back (the loop may be waiting)
        for c in batch.chunks:
            if not self.fills.current(c.request):
                continue
            self._tokens_done += c.tokens
            if c.last:
                self._finish(c.request, now_s)

    def _finish(self, req: Request, now_s: float) -> None:
        fetched = self.fills.end(req)
        if (self.direct_handoff and self.kv_policy is KVPolicy.OFFLOAD
                and req.output_tokens > max(1, req.generated)):
            # (`release_fetch`, then `write_for_handoff`: the fetch's pins pass on.)
            req.kv_chain, req.handoff = handoff_fetched(
                self.store, fetched, req.session_id, req.block_ids, self.hbm, self.host,
                now_s)
            if req.handoff is not None:
                self._handoffs = [h for h in self._handoffs if not h.released]
                self._handoffs.append(req.handoff)
        else:
            release_fetch(self.store, self.hbm, fetched)
            req.kv_chain = finish_call(self.kv_policy, self.store, req.session_id,
                                       req.block_ids, self.hbm, self.host, now_s)
        req.fill_end_s = now_s
        if req.output_tokens >= 1:
            req.generated = 1  # the fill's last logits give the first token
        self.log.add(now_s, self.name, "fill_done", req.call_id)
        if req.remaining <= 0:
            # No decode step: the fill's worker streams the token now. Otherwise the decode
            # worker streams it when the call joins a batch (workers.decode).
            req.first_token_s = now_s if req.output_tokens >= 1 else None
            req.finish(now_s)
            if self.on_done is not None:
                self.on_done(req, now_s)
        else:
            req.enter(DECODE_WAIT, now_s)
            self.ready.put(req)
