"""Decode workers: continuous batching, advancing many tokens per event.

While the batch does not change, the worker prices the whole run of steps up to
the next retirement as one vector (the step time grows with context, so the run
integrates it) and waits once. A request joining or a controller changing the
target batch interrupts the run at the end of the step in progress.

KV is accounted as a real engine sees it (`workers.kv_budget`): the worker does not
know when a sequence will stop. It admits while the sequences' current KV plus a
growth reserve fits, and a run also stops at the step where the growing KV would
overflow the instance; there the most recently admitted sequences are preempted.
A preempted sequence's HBM is released and it goes back to the head of the ready
buffer; on resuming, its input's KV is reloaded from its blobs and the KV of the
tokens it had generated is recomputed (a prefill of those tokens over the input,
priced by the cost core and counted in `Request.recomputed_tokens`), as vLLM v1 and
SGLang resume a retracted request by recompute. The KV plan of a run and the
preemption: `workers.decode_kv`.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable

import numpy as np

from costmodel.phase import Phase
from storage.store import BlobStore
from storage.tiers import Location, Tier
from workers.batching import plan_decode_admission
from workers.cluster import WorkerSpec
from workers.cost_source import CostSource
from workers.decode_kv import DecodeKv
from workers.events import EventLog
from workers.kv_budget import GrowthReserve
from workers.kv_io import FetchResult, fetch, release_fetch, release_handoff
from workers.kv_policy import DEFAULT_KV_POLICY, KVPolicy, finish_call
from workers.ready import ReadyBuffer
from workers.request import DECODE, DECODE_WAIT, DECODING, LOADING, TRANSFER, Request
from workers.run_wait import RunWait
from workers.state import StateMemo, WorkerState
from workers.token_gaps import TokenGaps


class DecodeWorker(DecodeKv):
    kv_policy: KVPolicy = DEFAULT_KV_POLICY  # where a call's KV goes when it retires
    # The run's recorder of the gaps before the tokens streamed (workers.token_gaps), set
    # by the runtime; None: not recorded.
    token_gaps: TokenGaps | None = None

    def __init__(self, spec: WorkerSpec, pricer: CostSource, store: BlobStore,
                 ready: ReadyBuffer, log: EventLog,
                 on_done: Callable[[Request, float], None] | None = None, jump: bool = True,
                 seed: int = 0):
        self.spec, self.pricer, self.store, self.ready, self.log = spec, pricer, store, ready, log
        self.name = spec.name  # read at every sample (the HBM figures)
        self.on_done = on_done
        self.jump = jump
        self.kv = spec.kv
        # Multi-token prediction: tokens per step and sequence are drawn from this worker's
        # own stream of the run's seed (the same seed and worker give the same draws).
        self.mtp = int(spec.layout.mtp)
        self.rng = np.random.default_rng([seed, zlib.crc32(spec.name.encode())])
        self.hbm = Location(Tier.HBM, spec.name)
        self.host = Location(Tier.DRAM, spec.node)
        # The pool's target and cap are per attention rank per micro-batch, as engines
        # count a batch (SGLang's max running requests per DP-attention rank, vLLM's
        # max_num_seqs per engine); the worker holds all of its ranks'.
        self.slots_per_unit = pricer.attention_ranks * spec.layout.pp
        self.max_sequences = spec.batch.max_batch_sequences * self.slots_per_unit
        self.target_batch = min(spec.batch.target_batch * self.slots_per_unit,
                                self.max_sequences)
        self.running: list[Request] = []  # in the order they joined
        self._loading: dict[int, Request] = {}  # KV on its way into HBM
        self._fetches: dict[int, FetchResult] = {}  # pinned prefixes, until retirement
        self._loaded: list[Request] = []
        self._reserve = GrowthReserve()
        self._tokens_done = 0
        self._busy_s = 0.0
        self.preempted = 0  # sequences this worker preempted
        self.recomputed_tokens = 0  # tokens it recomputed resuming sequences
        self._interrupt: asyncio.Event | None = None  # poked; set by `run` when it starts
        # The loop `run` runs on, kept: asyncio.get_running_loop makes a system call (getpid).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wait = RunWait()  # a run's, for a poke or its end
        self._requeueing = False
        self._replan = False
        self.accepting = True
        self._resident: float | None = None  # kv_resident_bytes, until the batch changes
        self._planned_tokens = 0  # the running sequences' context tokens at the last plan
        # The running sequences' least remaining output at the last run's plan, while the
        # batch is as planned (`_batch_changed` clears it): fewer steps retire none.
        self._least_remaining = 0
        self._states = StateMemo()
        # Sequences resumed after a stall that have streamed no token here yet: call id ->
        # the time of their last token before it (`token_gaps`).
        self._resumed: dict[int, float] = {}
        ready.subscribe(self._on_ready)

    def sequences_running(self) -> int:
        """`state().running` without building the state (asked at every completion)."""
        return len(self.running)

    def state(self) -> WorkerState:
        resident = self._resident  # kv_resident_bytes(), without a call while it is kept
        key = (len(self._loading) + len(self._loaded), len(self.running),
               self.kv_resident_bytes() if resident is None else resident, self._tokens_done,
               self._busy_s, self.target_batch, self.accepting)
        last = self._states.last(key)
        if last is not None:
            return last
        return self._states.keep(key, WorkerState(
            name=self.name, pool=self.spec.pool, phase="decode", queue_depth=key[0],
            running=key[1], kv_resident_bytes=key[2],
            kv_capacity_bytes=float(self.kv.instance_bytes), tokens_done=key[3],
            busy_s=key[4], target_batch=key[5], accepting=key[6]))

    def set_target_batch(self, sequences: int) -> None:
        """A controller's intervention: takes effect at the end of the current step. The
        worker's cap (`max_sequences`) bounds it, as an engine's bounds its batch."""
        self.target_batch = min(max(1, int(sequences)), self.max_sequences)
        self._poke()

    def _poke(self) -> None:
        if self._interrupt is not None:
            self._interrupt.set()
        self._wait.poke()

    def _on_ready(self) -> None:
        # Start loading at once; the running batch is interrupted only when KV arrives.
        if (self.accepting and not self._requeueing and self._interrupt is not None
                and self._occupied() < self.target_batch):
            before = self._occupied()
            self._admit(self._loop.time())
            if self._occupied() == before and self.running:
                # Held back for KV: plan the run again, to stop where it would fit.
                self._replan = True
                self._poke()

    def _admit(self, now_s: float) -> None:
        if not self.accepting or not len(self.ready):
            return
        used = self._admission_needs_sum(self._held())
        joined = plan_decode_admission(
            self._occupied(), used, self.ready.peek(), self.target_batch,
            self.kv.instance_bytes, self._admission_need)
        if not joined:
            return
        self.ready.take(joined)
        loop = self._loop
        for req in joined:
            result = fetch(self.store, req.block_ids, self.hbm, now_s, None)
            if req.handoff is not None:  # copied from its fill worker's HBM: that copy goes
                release_handoff(self.store, req.handoff, now_s)
            recompute_s = self._recompute_s(req)
            req.state = LOADING
            req.decode_worker = self.name
            req.enter(TRANSFER, now_s)
            self._loading[req.call_id] = req
            self._fetches[req.call_id] = result
            self.log.add(now_s, self.name, "load", req.call_id)
            if result.transfer is None:
                loop.call_at(now_s + (result.transfer_s + recompute_s), self._on_loaded,
                             req.call_id)
            else:  # on the links: its end is known when its copies are done
                result.transfer.add_done_callback(
                    lambda end_s, call_id=req.call_id, after_s=recompute_s:
                    loop.call_at(end_s + after_s, self._on_loaded, call_id))

    def _recompute_s(self, req: Request) -> float:
        """A resumed sequence (preempted, or moved from a lost worker) has KV for its
        input in blobs, not for the tokens it generated after the first: those are
        recomputed, a prefill over the input, before it joins."""
        tokens = max(0, req.generated - 1)
        if tokens == 0:
            return 0.0
        req.recomputed_tokens += tokens
        self.recomputed_tokens += tokens
        latency_s, _ = self.pricer.fill_s(Phase.MIDFILL, 1, tokens, req.input_tokens)
        self._busy_s += latency_s
        return latency_s

    def _on_loaded(self, call_id: int) -> None:
        req = self._loading.pop(call_id)
        req.enter(DECODE_WAIT, self._loop.time())
        self._loaded.append(req)
        self._poke()

    def _join(self, now_s: float) -> None:
        stalled = self.token_gaps.stalled if self.token_gaps is not None else None
        for req in self._loaded:
            if stalled and req.call_id in stalled:  # its next token's gap spans the stall
                self._resumed[req.call_id] = stalled.pop(req.call_id)
            req.state = DECODING
            if req.decode_start_s is None:
                req.decode_start_s = now_s
            if req.first_token_s is None:
                req.first_token_s = now_s  # the decode worker streams the output
            req.enter(DECODE, now_s)
            self.running.append(req)
            self.log.add(now_s, self.name, "join", req.call_id)
        if self._loaded:
            self._batch_changed()
        self._loaded.clear()

    async def run(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._interrupt = asyncio.Event()
        while True:
            now_s = loop.time()
            self._admit(now_s)
            if self._loaded:
                self._join(now_s)
            self._interrupt.clear()
            if not self.running:
                await self._interrupt.wait()
                continue
            steps = self._plan_run(now_s)
            if self.mtp > 0:
                run = self._mtp_run(steps)
                if run.steps == 0:  # the drafts' growth overflows at the first step
                    self._preempt([self.running[-1]], now_s)
                    self._reserve.after_preemption([r.generated for r in self.running])
                    continue
                ends = now_s + np.cumsum(self.pricer.decode_step_times_s(
                    len(self.running), run.mean_contexts))
                done = await self._run_steps(ends)
                if self.token_gaps is not None:  # before `_advance` retires anyone
                    self.token_gaps.decode_mtp_run(now_s, ends, done, run.gained,
                                                   self.running, self._resumed)
                self._advance(done, now_s, loop.time(), run.gained[done - 1])
                continue
            mean_context = self._planned_tokens / len(self.running)
            ends = self.pricer.decode_run_ends_s(now_s, len(self.running), mean_context, steps)
            done = await self._run_steps(ends)
            if self.token_gaps is not None:  # before `_advance` retires anyone
                self.token_gaps.decode_run(now_s, ends, done, self.running, self._resumed)
            self._advance(done, now_s, loop.time())

    async def _run_steps(self, ends: list[float] | np.ndarray) -> int:
        """Wait through priced steps ending at `ends` (ascending); return how many ran.
        An interrupt ends the run at the end of the step in progress, unless nothing needs
        the batch to change (a spurious wake), in which case the run goes on unpriced
        again."""
        loop = self._loop
        try:
            while True:
                j = await self._wait.until(loop, ends, self._interrupt.is_set())
                if j is None:
                    return len(ends)
                if (self._loaded or self._replan or self.target_batch < len(self.running)
                        or j == len(ends) - 1):
                    return j + 1
                self._interrupt.clear()
        finally:
            self._wait.forget()

    def _advance(self, steps: int, start_s: float, now_s: float,
                 gained: np.ndarray | None = None) -> None:
        """`steps` ran; each sequence gained `steps` tokens, or `gained[i]` with MTP (a
        sequence's last step may accept drafts past its end: they are not output)."""
        self._busy_s += now_s - start_s
        self._reserve.decay(steps)
        if gained is None and steps < self._least_remaining:
            # Short of the planned run's first retirement: every sequence goes on.
            for req in self.running:
                req.generated += steps
            self._tokens_done += len(self.running) * steps
            self._batch_changed()
            return
        still: list[Request] = []
        for i, req in enumerate(self.running):
            remaining = req.output_tokens - req.generated
            gain = steps if gained is None else int(gained[i])
            if gain < remaining:
                req.generated += gain
                self._tokens_done += gain
                still.append(req)
                continue
            # It ends: the count of tokens done is up to date before its retirement (its
            # listeners may read it), and so is the KV held.
            req.generated += remaining
            self._tokens_done += remaining
            self._resident = None
            self._retire(req, now_s)
        self.running = still
        self._batch_changed()

    def _retire(self, req: Request, now_s: float) -> None:
        release_fetch(self.store, self.hbm, self._fetches.pop(req.call_id))
        blocks = req.writeback_block_ids or req.block_ids
        req.kv_chain = finish_call(self.kv_policy, self.store, req.session_id, blocks,
                                   self.hbm, self.host, now_s)
        req.finish(now_s)
        self.log.add(now_s, self.name, "done", req.call_id)
        if self.on_done is not None:
            self.on_done(req, now_s)

