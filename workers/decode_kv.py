"""A decode worker's KV and the plan of its next run against it.

A real engine does not know when a sequence will stop (`workers.kv_budget`): the
worker admits while its sequences' KV plus a growth reserve fits, and a run ends at
the next retirement, at the step where the growing KV would overflow the instance, or
where the ready buffer's head, held back for KV, would be admitted. When not even one
step fits, the most recently admitted sequences are preempted: their HBM is released
and they go back to the head of the ready buffer. With multi-token prediction the
run's tokens are drawn first (`workers.decode_mtp`).
"""

from __future__ import annotations

import numpy as np

from costmodel.capacity import KVCapacity
from costmodel.mtp import draw_tokens_per_step
from storage.store import BlobStore
from storage.tiers import Location
from workers.cost_source import CostSource
from workers.decode_mtp import MTP_HORIZON_STEPS, MtpRun, plan_mtp_run
from workers.events import EventLog
from workers.kv_budget import (
    GrowthReserve,
    footprints,
    preemption_count,
    steps_that_fit,
    steps_until_admissible,
)
from workers.kv_io import FetchResult, release_fetch
from workers.kv_policy import KVPolicy, trim_retained
from workers.ready import ReadyBuffer
from workers.request import LatencyPart, Request


class DecodeKv:
    """What a decode worker's sequences hold and how far its next run goes: a base of
    `workers.decode.DecodeWorker`, which owns the state these read and change."""

    kv: KVCapacity
    kv_policy: KVPolicy
    pricer: CostSource
    store: BlobStore
    ready: ReadyBuffer
    log: EventLog
    name: str
    hbm: Location
    jump: bool
    mtp: int
    rng: np.random.Generator
    accepting: bool
    target_batch: int
    running: list[Request]
    preempted: int
    _loading: dict[int, Request]
    _loaded: list[Request]
    _fetches: dict[int, FetchResult]
    _reserve: GrowthReserve
    _resident: float | None
    _planned_tokens: int
    _least_remaining: int
    _replan: bool
    _requeueing: bool
    token_gaps: object  # workers.token_gaps.TokenGaps, or None
    _resumed: dict[int, float]

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

    def _admission_needs_sum(self, reqs) -> float:
        """`sum(self._admission_needs(reqs))`, the same double: without sliding layers in one
        pass over `reqs` (asked over the held batch at every admission, hundreds of
        sequences a worker at the essay's scale), each footprint `per_token * c + state`
        (`KVCapacity.linear_terms`)."""
        terms = self.kv.linear_terms
        if terms is None:
            return sum(self._admission_needs(reqs))
        per_token, state = terms
        reserve = self._reserve.tokens()
        return sum([per_token * (r.input_tokens + r.generated + reserve) + state for r in reqs])

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
        self._least_remaining = 0

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
        if self.jump:  # `until_retire` is the least remaining output (`_advance`)
            self._least_remaining = until_retire
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
        gaps = self.token_gaps
        for req in reqs:
            if gaps is not None:  # its last token came now, or before a stall not yet over
                gaps.stalled[req.call_id] = self._resumed.pop(req.call_id, now_s)
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
