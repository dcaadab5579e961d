"""Mixed (aggregated) workers: one instance fills and decodes, prefill chunks riding in
decode steps.

Each step is the running decodes plus up to a token budget (`max_batch_tokens`, decodes
counted in it) of prefill chunks, priced as one step request by request
(`costmodel.batch`): Sarathi-Serve's stall-free batching
(https://arxiv.org/abs/2403.02310) as vLLM v1 schedules it (running requests first,
then waiting ones into the remaining token budget) and SGLang's
`--enable-mixed-chunk`. A call's KV never leaves the worker between its fill and its
decode: the fill's last chunk gives the first token and the call joins the decode batch
at that step's end. Between turns the KV leaves HBM as the store does, when the call
retires.

The decode side is `DecodeWorker`'s: KV budget, preemption (a preempted sequence waits
in the worker's own buffer and resumes here), runs of steps priced as one vector when no
fill can start, retirement. The fill side is `ChunkedFills` (`workers.fill`). A call
starts its fill only when the decode batch has a slot and KV room for it, so calls wait
in this worker's queue, not inside a batch. The batch, fills included, holds at most
the target batch, and the target at most `max_batch_sequences` per attention rank
(`DecodeWorker.max_sequences`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

from storage.store import BlobStore
from workers.batching import FillChunk
from workers.clock import sleep_on
from workers.cluster import WorkerSpec
from workers.cost_source import CostSource
from workers.decode import DecodeWorker
from workers.events import EventLog
from workers.fill import ChunkedFills
from workers.kv_io import FetchResult, release_fetch
from workers.kv_policy import KVPolicy, finish_call, write_through
from workers.ready import ReadyBuffer
from workers.request import DECODE_WAIT, FILL, LOADING, QUEUED, Request
from workers.state import StateMemo, WorkerState


class MixedWorker(DecodeWorker):
    def __init__(self, spec: WorkerSpec, pricer: CostSource, store: BlobStore,
                 ready: ReadyBuffer, log: EventLog,
                 on_done: Callable[[Request, float], None] | None = None, jump: bool = True):
        # Its decode batch is fed by its own fills: the cluster's ready buffer is not its;
        # its own holds the sequences it preempted until they resume.
        super().__init__(spec, pricer, store, ReadyBuffer(f"{spec.name}-resume"), log,
                         on_done, jump)
        # Its cap counts every sequence it holds, filling or decoding, per attention rank
        # (vLLM's max_num_seqs counts prefilling requests too): a step carries at most the
        # whole worker's of them.
        self.fills = ChunkedFills(store, pricer.recompute_s,
                                  replace(spec.batch, max_batch_sequences=self.max_sequences))
        self.fills.on_loaded = self._arrived  # a prefix's copies on the links are done
        self.queue = self.fills.queue  # calls waiting to start or finish their fill
        self._filling: dict[int, Request] = {}
        self._wake_at: asyncio.TimerHandle | None = None
        self._mixed_states = StateMemo()  # by (the decode side's state, queue, filling)
        self._needs: dict[int, float] | None = None  # call id -> admission need, one plan
        self._fixed: list[float] | None = None  # `_may_start`'s, one plan

    # -- intake: the router hands calls here as to a fill worker -------------------
    def submit(self, req: Request, now_s: float) -> None:
        req.state = QUEUED
        req.fill_worker = self.name
        self.queue.append(req)
        self.log.add(now_s, self.name, "queued", req.call_id)
        self._arrived()

    def sequences_running(self) -> int:
        return len(self.running) + len(self._filling)

    def _occupied(self) -> int:
        """The decode side's, and the calls filling: a preempted sequence resumes only into
        a batch whose fills leave it a slot."""
        return super()._occupied() + len(self._filling)

    def state(self) -> WorkerState:
        base = super().state()
        key = (base, len(self.queue), len(self._filling))
        last = self._mixed_states.last(key)
        if last is not None:
            return last
        return self._mixed_states.keep(key, replace(
            base, phase="mixed", queue_depth=base.queue_depth + key[1],
            running=base.running + key[2]))

    # -- KV: sequences being filled hold their prompt's KV ---------------------------
    def _held(self) -> list[Request]:
        """The decode side's, the calls filling, and those whose prefix is loading."""
        loading = [r for r in self.queue
                   if r.call_id in self.fills.fetched and r.call_id not in self._filling]
        return [*super()._held(), *self._filling.values(), *loading]

    def _loading_bytes(self) -> float:
        if not self._filling:
            return super()._loading_bytes()  # + 0: sum() of nothing
        planned = self.fills.planned
        return super()._loading_bytes() + self.kv.sequences_bytes_sum(
            [r.prefix_tokens + planned.get(r.call_id, 0) for r in self._filling.values()])

    def _may_start(self, req: Request, starting: list[Request]) -> bool:
        """A slot in the decode batch and KV room (its prompt plus the growth reserve)
        beside everything held (`_held()` and `starting`, in that order); a lone call
        always starts."""
        # `_admission_need` kept for the plan of one step (`_needs`): nothing a plan does
        # changes a held sequence's length or the growth reserve, and each call here sums
        # the same sequences' needs again. The decode side's and the fills' needs are
        # listed once per plan (`_fixed`): a plan changes neither. Summed in the order
        # held, as sum() over them.
        needs = {} if self._needs is None else self._needs
        fixed = self._fixed if self._needs is not None else None
        if fixed is None:
            fixed = self._admission_needs([*super()._held(), *self._filling.values()])
            if self._needs is not None:
                self._fixed = fixed
        # A call fetched by this plan is both loading (in `_held()`) and in `starting`:
        # it counts once.
        if (req.call_id in self._filling or req.call_id in self._loading or req in self.running
                or req in self._loaded):  # held already, not yet to start: no shortcut
            held = [r for r in dict.fromkeys((*self._held(), *starting)) if r is not req]
            values = [self._need(r, needs) for r in held]
        else:
            fetched, filling = self.fills.fetched, self._filling
            tail = [r for r in dict.fromkeys((*[r for r in self.queue
                                                if r.call_id in fetched
                                                and r.call_id not in filling],
                                              *starting)) if r is not req]
            values = fixed + [self._need(r, needs) for r in tail]
        if not values:
            return True
        if len(values) >= self.target_batch:
            return False
        return sum(values) + self._need(req, needs) <= self.kv.instance_bytes

    def _need(self, req: Request, needs: dict[int, float]) -> float:
        need = needs.get(req.call_id)
        if need is None:
            need = needs[req.call_id] = self._admission_need(req)
        return need

    # -- the loop ---------------------------------------------------------------------
    async def run(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._interrupt = asyncio.Event()
        step_tokens, decode_tokens = self.spec.batch.max_batch_tokens, 1 + self.spec.layout.mtp
        while True:
            now_s = loop.time()
            self._admit(now_s)  # sequences it preempted, resuming
            if self._loaded:
                self._join(now_s)
            self._interrupt.clear()
            chunks = []
            if self.queue:  # (a plan of no call is no chunk)
                self._needs, self._fixed = {}, None
                chunks = self.fills.prepare(self.hbm, now_s,
                                            step_tokens - len(self.running) * decode_tokens,
                                            self._may_start, skip_loading=True)
                self._needs = self._fixed = None
            self._wake_when_loaded(now_s)
            if chunks:
                await self._mixed_step(chunks, now_s)
            elif self.running:
                await self._decode_run(now_s)
            else:
                await self._interrupt.wait()

    def _wake_when_loaded(self, now_s: float) -> None:
        """A call's prefix still loading into HBM holds no step; its first chunk rides in
        the first step after it arrives (vLLM's requests waiting for remote KV)."""
        at_s = self.fills.next_load_s(now_s)
        if at_s is None or (self._wake_at is not None and not self._wake_at.cancelled()
                            and self._wake_at.when() <= at_s):
            return
        if self._wake_at is not None:
            self._wake_at.cancel()
        self._wake_at = self._loop.call_at(at_s, self._loaded_prefix)

    def _loaded_prefix(self) -> None:
        self._wake_at = None
        self._arrived()

    def _arrived(self) -> None:
        """A call arrived or a prefix reached HBM: a decode run in progress ends at the
        end of its step in progress (the call's first chunk rides in the next step). The
        run's plan is stale (`_replan`, cleared by the next plan) and the poke
        wakes its wait: `DecodeWorker._run_steps` then stops at that step's end."""
        self._replan = True
        self._poke()

    async def _decode_run(self, now_s: float) -> None:
        """No fill can start: the decode worker's run of steps, to the next retirement."""
        steps = self._plan_run(now_s)
        mean_context = self._planned_tokens / len(self.running)
        ends = self.pricer.decode_run_ends_s(now_s, len(self.running), mean_context, steps)
        done = await self._run_steps(ends)
        if self.token_gaps is not None:  # before `_advance` retires anyone
            self.token_gaps.decode_run(now_s, ends, done, self.running, self._resumed)
        self._advance(done, now_s, self._loop.time())

    async def _mixed_step(self, chunks: list[FillChunk], now_s: float) -> None:
        """One step: the running decodes (one token each) and the chunks, priced together.
        Chunks join only once their call's cached prefix is in HBM."""
        loop = self._loop
        # Preempts first if the decodes' KV would overflow.
        contexts = self._plan_step(now_s) if self.running else []
        transfer_s, starting = self.fills.begin(chunks, now_s)
        for req in starting:
            self._filling[req.call_id] = req
            req.enter(FILL, now_s)
        if starting:
            self.log.add(now_s, self.name, "fill_start", *(r.call_id for r in starting))
        decodes = len(self.running)
        latency_s, _ = self.pricer.mixed_step_s(
            [c.tokens for c in chunks], [c.cached_tokens for c in chunks], contexts)
        await sleep_on(loop, now_s + transfer_s + latency_s - loop.time())
        end_s = loop.time()
        self.fills.resume(chunks)
        if self.token_gaps is not None and decodes:  # the chunks' time is in every gap
            self.token_gaps.decode_run(now_s, [end_s], 1, self.running, self._resumed)
        self._advance(1 if decodes else 0, now_s, end_s)
        for c in chunks:
            self._tokens_done += c.tokens
            if c.last:
                self._filled(c.request, end_s)

    def _filled(self, req: Request, now_s: float) -> None:
        """Its last chunk ran: its KV is written where it is, in this worker's HBM, and
        stays pinned there for its decode; it joins the batch at this step boundary."""
        release_fetch(self.store, self.hbm, self.fills.end(req))
        del self._filling[req.call_id]
        req.fill_end_s = now_s
        self.log.add(now_s, self.name, "fill_done", req.call_id)
        if req.output_tokens >= 1:
            req.generated = 1  # the fill's last logits give the first token
        if req.remaining <= 0:
            req.kv_chain = finish_call(self.kv_policy, self.store, req.session_id,
                                       req.block_ids, self.hbm, self.host, now_s)
            req.first_token_s = now_s
            req.finish(now_s)
            if self.on_done is not None:
                self.on_done(req, now_s)
            return
        req.kv_chain, pinned = self._write_resident(req, now_s)
        req.state = LOADING
        req.decode_worker = self.name
        req.enter(DECODE_WAIT, now_s)
        self._fetches[req.call_id] = FetchResult(req.prefix_tokens, 0, 0.0, pinned)
        self._loaded.append(req)

    def _write_resident(self, req: Request, now_s: float) -> tuple[tuple, tuple]:
        """The new KV as blobs at this worker's HBM, pinned (no offload): (chain, pinned).
        No room: written to host memory as a fill worker would, nothing pinned."""
        if not req.block_ids:
            return (), ()
        plan = self.store.plan_write(req.block_ids, self.hbm, now_s)
        if not plan.fits:
            return finish_call(self.kv_policy, self.store, req.session_id, req.block_ids,
                               self.hbm, self.host, now_s), ()
        self.store.apply(plan)
        if self.kv_policy is KVPolicy.RETAIN:
            write_through(self.store, plan, self.host, now_s)
        self.store.ref(req.session_id, plan.chain)
        pinned = tuple(filter(self.store.placement.at[self.hbm].__contains__, plan.chain))
        self.store.pin(self.hbm, pinned)
        return plan.chain, pinned
