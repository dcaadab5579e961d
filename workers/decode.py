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
SGLang resume a retracted request by recompute.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable

import numpy as np

from costmodel.mtp import draw_tokens_per_step
from costmodel.phase import Phase
from storage.store import BlobStore
from storage.tiers import Location, Tier
from workers.batching import plan_decode_admission
from workers.cluster import WorkerSpec
from workers.decode_mtp import MTP_HORIZON_STEPS, MtpRun, plan_mtp_run
from workers.events import EventLog
from workers.kv_budget import (
    GrowthReserve,
    footprints,
    preemption_count,
    steps_that_fit,
    steps_until_admissible,
)
from workers.kv_io import FetchResult, fetch, release_fetch, release_handoff
from workers.kv_policy import DEFAULT_KV_POLICY, KVPolicy, finish_call, trim_retained
from workers.pricing import StepPricer
from workers.ready import ReadyBuffer
from workers.request import LatencyPart, Request, RequestState
from workers.run_wait import RunWait
from workers.state import WorkerState, worker_state


class DecodeWorker:
    kv_policy: KVPolicy = DEFAULT_KV_POLICY  # where a call's KV goes when it retires

    def __init__(self, spec: WorkerSpec, pricer: StepPricer, store: BlobStore,
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
        # The pool's target is per attention rank per micro-batch; the worker holds all.
        self.slots_per_unit = pricer.attention_ranks * spec.layout.pp
        self.target_batch = spec.batch.target_batch * self.slots_per_unit
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
        self._wait = RunWait()  # a run's, for a poke or its end
        self._requeueing = False
        self._replan = False
        self.accepting = True
        self._resident: float | None = None  # kv_resident_bytes, until the batch changes
        self._planned_tokens = 0  # the running sequences' context tokens at the last plan
        self._state_key: tuple | None = None
        self._state: WorkerState | None = None
        ready.subscribe(self._on_ready)

    def _footprint(self, req: Request) -> float:
        """KV of `req` now, per GPU of its attention rank group (KVCapacity units)."""
        return self.kv.sequence_bytes_per_gpu(req.context_tokens)

    def _admission_need(self, req: Request) -> float:
        """Its KV now plus the reserve for its growth (`kv_budget.GrowthReserve`)."""
        return self.kv.sequence_bytes_per_gpu(req.context_tokens + self._reserve.tokens())

    def _admission_needs(self, reqs) -> list[float]:
        """`[self._admission_need(r) for r in reqs]`, the same doubles, without three calls
        a sequence (asked over the held sequences at every step plan)."""
        reserve = self._reserve.tokens()
        # Request.context_tokens inline.
        return self.kv.sequences_bytes_per_gpu([r.input_tokens + r.generated + reserve
                                                for r in reqs])

    def _held(self) -> list[Request]:
        return [*self.running, *self._loading.values(), *self._loaded]

    def _occupied(self) -> int:
        return len(self.running) + len(self._loading) + len(self._loaded)

    def kv_resident_bytes(self) -> float:
        """KV of the running batch, in KVCapacity units (sum of per-GPU footprints).
        Kept until the batch or its sequences' lengths change (`_batch_changed`)."""
        if self._resident is None:
            # _footprint inline (asked at most samples of a busy worker): the same sum.
            self._resident = self.kv.sequences_bytes_sum(
                [r.input_tokens + r.generated for r in self.running])
        return self._resident

    def _batch_changed(self) -> None:
        """Called wherever `running` or a running sequence's length changes."""
        self._resident = None

    def sequences_running(self) -> int:
        """`state().running` without building the state (asked at every completion)."""
        return len(self.running)

    def state(self) -> WorkerState:
        # Asked every fast-loop period: the last state is handed out again (it is frozen)
        # while nothing in it changed.
        key = (len(self._loading) + len(self._loaded), len(self.running),
               self.kv_resident_bytes(), self._tokens_done, self._busy_s, self.target_batch,
               self.accepting)
        if key == self._state_key:
            return self._state
        self._state_key = key
        self._state = worker_state(
            name=self.name, pool=self.spec.pool, phase="decode",
            queue_depth=key[0], running=key[1], kv_resident_bytes=key[2],
            kv_capacity_bytes=float(self.kv.instance_bytes),
            tokens_done=key[3], busy_s=key[4], target_batch=key[5], accepting=key[6])
        return self._state

    def set_target_batch(self, sequences: int) -> None:
        """A controller's intervention: takes effect at the end of the current step."""
        self.target_batch = max(1, int(sequences))
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
            self._admit(asyncio.get_running_loop().time())
            if self._occupied() == before and self.running:
                # Held back for KV: plan the run again, to stop where it would fit.
                self._replan = True
                self._poke()

    def _admit(self, now_s: float) -> None:
        if not self.accepting or not len(self.ready):
            return
        used = sum(self._admission_needs(self._held()))
        joined = plan_decode_admission(
            self._occupied(), used, self.ready.peek(), self.spec.batch,
            self.kv.instance_bytes, self._admission_need, target_batch=self.target_batch)
        if not joined:
            return
        self.ready.take(joined)
        loop = asyncio.get_running_loop()
        for req in joined:
            result = fetch(self.store, req.block_ids, self.hbm, now_s, None)
            if req.handoff is not None:  # copied from its fill worker's HBM: that copy goes
                release_handoff(self.store, req.handoff, now_s)
            recompute_s = self._recompute_s(req)
            req.state = RequestState.LOADING
            req.decode_worker = self.name
            req.enter(LatencyPart.TRANSFER, now_s)
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
        req.enter(LatencyPart.DECODE_WAIT, asyncio.get_running_loop().time())
        self._loaded.append(req)
        self._poke()

    def _join(self, now_s: float) -> None:
        for req in self._loaded:
            req.state = RequestState.DECODING
            if req.decode_start_s is None:
                req.decode_start_s = now_s
            if req.first_token_s is None:
                req.first_token_s = now_s  # the decode worker streams the output
            req.enter(LatencyPart.DECODE, now_s)
            self.running.append(req)
            self.log.add(now_s, self.name, "join", req.call_id)
        if self._loaded:
            self._batch_changed()
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
                self._advance(done, now_s, loop.time(), run.gained[done - 1])
                continue
            mean_context = self._planned_tokens / len(self.running)
            ends = self.pricer.decode_run_ends_s(now_s, len(self.running), mean_context, steps)
            done = await self._run_steps(ends)
            self._advance(done, now_s, loop.time())

    def _mtp_run(self, horizon: int) -> MtpRun:
        """Draw the next steps' tokens (1 + accepted drafts per sequence) and find where
        the run ends; `horizon`, the one-token plan, bounds it (a step yields >= 1)."""
        n = len(self.running)
        h = max(1, min(horizon, MTP_HORIZON_STEPS))
        tokens = draw_tokens_per_step(self.rng, self.mtp, (h, n), self.pricer.eff.mtp_acceptance)
        contexts = np.array([r.context_tokens for r in self.running], dtype=np.float64)
        remaining = np.array([r.remaining for r in self.running], dtype=np.float64)
        admit = None
        if self.accepting and len(self.ready) and self._occupied() < self.target_batch:
            waiting = np.array([r.context_tokens for r in (*self._loading.values(),
                                                           *self._loaded)], dtype=np.float64)
            admit = (waiting, float(self.ready.peek()[0].context_tokens))
        return plan_mtp_run(self.kv, self._reserve, tokens, contexts, remaining,
                            self._loading_bytes(), admit)

    def _loading_bytes(self) -> float:
        if not self._loading and not self._loaded:
            return 0  # sum() of nothing
        # _footprint inline, in one call for the sequences (the same number, summed alike).
        return self.kv.sequences_bytes_sum(
            [r.input_tokens + r.generated for r in (*self._loading.values(), *self._loaded)])

    def _plan_run(self, now_s: float) -> int:
        """Steps of the next run: to the next retirement (the plant decides when a
        sequence stops), or to the step where KV would overflow. When not even one step
        fits, the most recently admitted sequences are preempted first."""
        self._replan = False
        running = self.running
        # Request.remaining and .context_tokens inline: this runs per run, over the batch.
        until_retire = min([r.output_tokens - r.generated for r in running]) if self.jump else 1
        # A list: a short batch is planned in Python floats (kv_budget.footprints_sum).
        contexts = [r.input_tokens + r.generated for r in running]
        other = self._loading_bytes()
        fit = steps_that_fit(self.kv, contexts, other, until_retire)
        if fit == 0 and len(self.running) > 1:
            contexts = self._preempt_to_fit(contexts, other, now_s)
            until_retire = min(r.remaining for r in self.running) if self.jump else 1
            fit = steps_that_fit(self.kv, contexts, other, until_retire)
        # The batch's context tokens, for the run's mean context (an exact int sum).
        self._planned_tokens = sum(contexts)
        # A lone sequence larger than the instance runs anyway: nothing else to free.
        steps = min(until_retire, fit) if fit > 0 else until_retire
        steps = min(steps, self._steps_until_admission(contexts, steps))
        if self.kv_policy is KVPolicy.RETAIN:
            # Retained blobs fit in what the sequences held leave at the run's end, each
            # grown by at most 1 + MTP drafts tokens a step (workers.kv_policy).
            grown = np.asarray(contexts, dtype=np.float64) + steps * (1 + self.mtp)
            held = float(footprints(self.kv, grown).sum()) + other
            trim_retained(self.store, self.hbm, held / self.kv.instance_bytes, now_s)
        return steps

    def _plan_step(self, now_s: float) -> list[int]:
        """`_plan_run` for one step whose count of steps nobody reads (a mixed step): the
        same preemption, from the same check (whether even one step fits does not depend
        on the horizon, at least one step for a running sequence), without the run's
        horizon (the batch's least remaining output, the ready head's admission). Returns
        the running sequences' context tokens. A worker that trims retained blobs to the
        run's growth plans the whole run."""
        if self.kv_policy is KVPolicy.RETAIN:
            self._plan_run(now_s)
            return [r.input_tokens + r.generated for r in self.running]
        self._replan = False
        # Request.context_tokens inline: this runs per step, over the batch.
        contexts = [r.input_tokens + r.generated for r in self.running]
        other = self._loading_bytes()
        if steps_that_fit(self.kv, contexts, other, 1) == 0 and len(self.running) > 1:
            contexts = self._preempt_to_fit(contexts, other, now_s)
        return contexts

    def _preempt_to_fit(self, contexts: list[int], other: float, now_s: float) -> list[int]:
        """Not even one step fits: the most recently admitted sequences are preempted
        until one does. The kept sequences' context tokens (a prefix of `contexts`)."""
        drop = preemption_count(self.kv, contexts, other)
        self._preempt(self.running[len(self.running) - drop:], now_s)
        self._reserve.after_preemption([r.generated for r in self.running])
        return contexts[:len(self.running)]

    def _steps_until_admission(self, contexts: list[int], horizon: int) -> int:
        """The run also ends where the ready buffer's head, held back for KV, would be
        admitted as the growth reserve decays (a worker checking every step would)."""
        if (horizon <= 1 or not self.accepting or not len(self.ready)
                or self._occupied() >= self.target_batch):
            return horizon
        waiting = np.array([r.context_tokens for r in (*self._loading.values(), *self._loaded)],
                           dtype=np.float64)
        head = self.ready.peek()[0].context_tokens
        k = steps_until_admissible(self.kv, self._reserve, contexts, waiting, head, horizon)
        return k if k > 0 else horizon

    def _preempt(self, reqs: list[Request], now_s: float) -> None:
        """Release their HBM and put them back at the head of the ready buffer, oldest
        first, in front of the calls already waiting there."""
        gone = {id(r) for r in reqs}
        self.running = [r for r in self.running if id(r) not in gone]
        self._batch_changed()
        for req in reqs:
            release_fetch(self.store, self.hbm, self._fetches.pop(req.call_id))
            req.preemptions += 1
            req.decode_worker = None
            req.enter(LatencyPart.DECODE_WAIT, now_s)
            self.log.add(now_s, self.name, "preempt", req.call_id)
        self.preempted += len(reqs)
        waiting = list(self.ready.peek())
        self._requeueing = True  # none of them comes straight back here
        try:
            self.ready.take(waiting)
            for req in (*reqs, *waiting):
                self.ready.put(req)
        finally:
            self._requeueing = False

    async def _run_steps(self, ends: list[float] | np.ndarray) -> int:
        """Wait through priced steps ending at `ends` (ascending); return how many ran.
        An interrupt ends the run at the end of the step in progress, unless nothing needs
        the batch to change (a spurious wake), in which case the run goes on unpriced
        again."""
        loop = asyncio.get_running_loop()
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
        still: list[Request] = []
        if gained is None:
            # Every sequence gains `steps` tokens but those that end: the count of tokens
            # done is brought up to date before each retirement (its listeners may read it).
            keep = still.append
            counted = 0  # of `still`, the sequences already counted in `_tokens_done`
            for req in self.running:
                remaining = req.output_tokens - req.generated
                if steps < remaining:
                    req.generated += steps
                    keep(req)
                    continue
                req.generated += remaining
                self._tokens_done += (len(still) - counted) * steps + remaining
                counted = len(still)
                self._resident = None  # its listeners may ask for the KV held
                self._retire(req, now_s)
            self._tokens_done += (len(still) - counted) * steps
        else:
            for i, req in enumerate(self.running):
                remaining = req.output_tokens - req.generated
                gain = min(int(gained[i]), remaining)
                req.generated += gain
                self._tokens_done += gain
                if gain < remaining:
                    still.append(req)
                    continue
                self._resident = None  # its listeners may ask for the KV held
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

