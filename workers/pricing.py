"""What a worker asks of the cost core: the time of its next step.

A worker is one model instance (`pp` stages of `max(tp, ep)` GPUs). Its
sequences are placed whole on `attention_ranks = max(tp, ep) / tp` data-parallel
attention ranks, round robin (SGLang's data-parallel controller, see
`costmodel.batch`): a step lasts as long as its slowest rank, the one with
`ceil(sequences / attention_ranks)` of them, while the routed experts and the
all-to-all see every rank's tokens (`Configs.group_sequences`). One prompt fills on
one rank. A fill step (chunked prefill) and a mixed step (decodes with prefill
chunks) are priced request by request (`costmodel.batch`). A decode worker's
sequences advance one token per step, or a drawn 1 + accepted drafts with
multi-token prediction (then steps are priced as steps, `decode_step_times_s`);
the step time grows with context, so a run of steps is priced as one vector.

A decode layout whose routed experts live on an expert pool (`AFLayout`,
attention-FFN disaggregation) is priced by `costmodel.disagg`: same interface,
so a `DecodeWorker` runs unchanged on it.

`StepPricer` is the roofline's `CostSource` (`workers.cost_source`). Colocated
decode steps and heterogeneous batch steps are priced by the cost core's own term
functions on one configuration's floats (`workers.fast_pricing`, `workers.step_tail`,
`workers.fast_batch`): the same doubles as the vectorised core, without its per-call
overhead. Split (attention-FFN) decode stays on the core.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from costmodel.batch import batch_step_cost
from costmodel.disagg import AFLayout, af_decode_times
from costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from costmodel.hardware import HardwareSpec, HardwareTable
from costmodel.layout import Layout
from costmodel.model import ModelSpec
from costmodel.phase import Configs, Phase, step_times
from costmodel.precision import BYTES_PER_ELEMENT
from workers.fast_batch import BatchTail
from workers.fast_pricing import Pricing
from workers.step_tail import StepTail

# Runs of at most this many decode steps are priced in a Python loop; longer ones as
# array operations (a Python step costs a few us, an array operation ~1 us). One
# algorithm whatever the build: which runs are priced which way does not depend on
# whether a module was compiled (the doubles are the same either way).
SCALAR_STEPS = 12
# A run's step ends, as Python floats, up to this many steps: the list is what the run
# reads (a bisect a poke), not an array to convert. A step costs ~0.9 us as Python and
# ~0.06 us compiled, a run as arrays ~9-10 us either way: 16 is near the pure build's
# best and takes most of the compiled build's gain on the replays' runs (most are short;
# docs/performance.md, "The speed back").
SCALAR_RUN_STEPS = 16
# Batch steps of at most this many requests are memoised.
BATCH_MEMO_REQUESTS = 16


def batch_request_key(new_tokens, cached_tokens, decoding=False) -> tuple[tuple, tuple, tuple]:
    """A heterogeneous batch step's requests as hashable tuples (new tokens, cached tokens,
    decoding flags), the form every cost source prices and memoises them in; `decoding`
    is one flag for all or one per request."""
    n = len(cached_tokens)
    flags = (bool(decoding),) * n if isinstance(decoding, bool) else tuple(map(bool, decoding))
    return tuple(map(int, new_tokens)), tuple(map(int, cached_tokens)), flags


class StepPricer:
    def __init__(self, model: ModelSpec, hardware: HardwareSpec, layout: Layout,
                 eff: Efficiency = DEFAULT_EFFICIENCY):
        self.model, self.hardware, self.layout, self.eff = model, hardware, layout, eff
        self._table = HardwareTable((hardware,))
        self._decode_times = self._colocated_decode
        if isinstance(layout, AFLayout):
            # Row 1 of the table is the expert instance's hardware.
            self._table = HardwareTable((hardware, layout.experts_hardware))
            self._decode_times = self._split_decode
        self.attention_ranks = layout.stage_gpus // layout.tp
        kvb = BYTES_PER_ELEMENT[layout.kv]
        self.kv_bytes_per_token = model.kv_bytes_per_token(kvb)
        self.state_bytes_per_sequence = model.state_bytes_per_sequence(kvb)
        self._fill = lru_cache(maxsize=65536)(self._fill_uncached)
        self._batch = lru_cache(maxsize=65536)(self._batch_uncached)
        self._tail = lru_cache(maxsize=4096)(self._tail_uncached)
        self._fast_decode = not isinstance(layout, AFLayout)
        self._pricing = Pricing(model, self._table, self._configs(Phase.DECODE, 1.0, 1, 0.0),
                                eff)
        self._batch_tail = BatchTail(model, self._table, eff, layout)

    def _configs(self, phase: Phase, batch: float, new_tokens: float, context,
                 group_sequences: float | None = None) -> Configs:
        # Constants as 0-d arrays that broadcast against the context vector: building
        # full columns would cost more than pricing a short decode run.
        context = np.atleast_1d(np.asarray(context, dtype=np.float64))
        lay = self.layout

        def col(value, dtype=np.float64):
            return np.asarray(value, dtype=dtype)

        return Configs(phase=col(int(phase), np.int64), batch=col(batch), new_tokens=col(new_tokens),
                       context=context, pp=col(lay.pp), tp=col(lay.tp), ep=col(lay.ep),
                       precision=col(int(lay.weights), np.int64), hardware=col(0, np.int64),
                       kv_precision=col(int(lay.kv), np.int64), mtp=col(lay.mtp),
                       attention_precision=col(int(lay.attention_precision), np.int64),
                       group_sequences=None if group_sequences is None else col(group_sequences))

    def per_rank(self, sequences: float) -> float:
        """Sequences on the slowest attention rank: whole sequences, placed round robin."""
        return float(math.ceil(sequences / self.attention_ranks))

    def group(self, sequences: float) -> float | None:
        """`Configs.group_sequences` of `sequences` on this worker (None: one rank)."""
        return None if self.attention_ranks == 1 else float(sequences)

    def _fill_uncached(self, phase: Phase, sequences: int, new_tokens: int,
                       cached_tokens: int) -> tuple[float, float]:
        # The tail depends on the phase, batch and new tokens only: fills that differ in
        # their cached prefix share it (`_tail`).
        step_s = self._tail(phase, sequences, new_tokens).step_s(
            float(cached_tokens))
        # The pipeline takes a new batch every stage time; the batch itself takes step_s.
        return step_s, step_s / self.layout.pp

    def fill_s(self, phase: Phase, sequences: int, mean_new_tokens: float,
               mean_cached_tokens: float) -> tuple[float, float]:
        """(latency, occupancy) of one fill batch: the batch's tokens are done after
        `latency`; the worker can start the next batch after `occupancy`."""
        return self._fill(phase, int(sequences), round(mean_new_tokens),
                          round(mean_cached_tokens))

    def fill_once_s(self, phase: Phase, sequences: int, mean_new_tokens: float,
                    mean_cached_tokens: float) -> float:
        """`fill_s(...)[0]`, the same double, for a caller that keeps its own memo of it
        (the controller's predictor): not kept in this pricer's."""
        return self._fill_uncached(phase, int(sequences), round(mean_new_tokens),
                                   round(mean_cached_tokens))[0]

    def fill_step_s(self, new_tokens, cached_tokens, decoding=False) -> tuple[float, float]:
        """(latency, occupancy) of one step of a heterogeneous batch, priced per request
        (`costmodel.batch`): chunked prefill, or decodes with prefill chunks riding along
        (`decoding` per request). The requests spread over the attention ranks."""
        # A small step repeats (chunked prefill under a token budget repeats its requests
        # and chunks): memoised. A big one (decodes riding with chunks) never does.
        price = (self._batch if len(cached_tokens) <= BATCH_MEMO_REQUESTS
                 else self._batch_uncached)
        return price(*batch_request_key(new_tokens, cached_tokens, decoding))

    def mixed_step_s(self, chunk_tokens: list[int], chunk_cached: list[int],
                     decode_contexts: list[int]) -> tuple[float, float]:
        """`fill_step_s(chunk_tokens + [1] * d, chunk_cached + decode_contexts,
        [False] * len(chunk_tokens) + [True] * d)` for d decodes, the same doubles: a
        mixed worker's step, prefill chunks then decodes, every count an int. Such a step
        never repeats: priced without the memo (whose hit gives the same doubles)."""
        step_s = self._batch_tail.mixed_step_s(chunk_tokens, chunk_cached, decode_contexts)
        return step_s, step_s / self.layout.pp

    def fill_core_s(self, phase: Phase, sequences: int, new_tokens: int,
                    cached_tokens: int) -> tuple[float, float]:
        """`fill_s` by the vectorised core, unmemoised: the fast path's reference."""
        step, _ = step_times(self.model, self._table,
                             self._configs(phase, self.per_rank(sequences), new_tokens,
                                           cached_tokens, self.group(sequences)), self.eff)
        step_s = float(step[0])
        return step_s, step_s / self.layout.pp

    def _tail_uncached(self, phase: Phase, sequences: float, new_tokens: float) -> StepTail:
        return StepTail(self._pricing, phase, self.per_rank(sequences), float(new_tokens),
                        self.group(sequences))

    def _batch_uncached(self, new_tokens: tuple, cached_tokens: tuple,
                        decoding: tuple) -> tuple[float, float]:
        step_s = self._batch_tail.step_s(new_tokens, cached_tokens, decoding)
        return step_s, step_s / self.layout.pp

    def batch_core_s(self, new_tokens: tuple, cached_tokens: tuple,
                     decoding: tuple) -> tuple[float, float]:
        """`fill_step_s` by the vectorised core (`costmodel.batch`), unmemoised: the
        reference the fast path is checked and measured against."""
        lay = self.layout
        cost = batch_step_cost(
            self.model, self._table, np.array(new_tokens, dtype=np.float64),
            np.array(cached_tokens, dtype=np.float64), np.array(decoding, dtype=bool),
            pp=lay.pp, tp=lay.tp, ep=lay.ep, precision=lay.weights, kv_precision=lay.kv,
            mtp=lay.mtp, attention_precision=lay.attention_precision,
            eff=self.eff)
        return cost.step_time_s, cost.step_time_s / lay.pp

    def recompute_s(self, tokens: int) -> float:
        """Recomputing a prefix from text: a prefill of that many tokens, alone."""
        return self.fill_s(Phase.PREFILL, 1, tokens, 0)[0]

    def decode_steps_s(self, sequences: int, mean_context: float, steps: int) -> np.ndarray:
        """Times of `steps` decode steps; every sequence gains one token a step. With
        multi-token prediction a step yields more than one token on average: the time
        returned is per token (the cost core's TPOT)."""
        if not self._fast_decode:
            return self.decode_steps_core_s(sequences, mean_context, steps)
        tail = self._tail(Phase.DECODE, sequences, 1)
        if steps <= SCALAR_STEPS:
            return np.array(tail.tpots_s(mean_context, steps))
        return tail.tpots_array_s(mean_context, steps)

    def decode_run_ends_s(self, start_s: float, sequences: int, mean_context: float,
                          steps: int) -> list[float] | np.ndarray:
        """When each step of a decode run starting at `start_s` ends:
        `start_s + decode_steps_s(...).cumsum()`, the same doubles; a short run's as a
        list of Python floats (numpy's cumsum adds in order, as `itertools.accumulate`),
        a long run's as numpy's array (a list of hundreds of floats costs more to make
        than the run's few look-ups in it save)."""
        if not self._fast_decode:
            return start_s + self.decode_steps_core_s(sequences, mean_context, steps).cumsum()
        # decode_steps_s's tail, looked up once.
        tail = self._tail(Phase.DECODE, sequences, 1)
        if steps <= SCALAR_RUN_STEPS:
            return tail.tpots_s(mean_context, steps, start_s)
        # cumsum as the ufunc's accumulate: the same additions in the same order, without
        # the method's ~1 us of overhead.
        ends = np.add.accumulate(tail.tpots_array_s(mean_context, steps))
        ends += start_s
        return ends

    def decode_steps_core_s(self, sequences: int, mean_context: float,
                            steps: int) -> np.ndarray:
        """`decode_steps_s` by the vectorised core: the fast path's reference."""
        contexts = mean_context + np.arange(steps, dtype=np.float64)
        return self._decode_times(
            self._configs(Phase.DECODE, self.per_rank(sequences), 1, contexts,
                              self.group(sequences)))[1]

    def decode_step_times_s(self, sequences: int, mean_contexts) -> np.ndarray:
        """Times of decode steps whose sequences start at `mean_contexts` (one per step).
        With multi-token prediction each step verifies 1 + mtp tokens per sequence; this
        is the step's time, however many tokens it yields (the worker draws those)."""
        if not self._fast_decode:
            return self.decode_step_times_core_s(sequences, mean_contexts)
        tail = self._tail(Phase.DECODE, sequences, 1)
        contexts = np.asarray(mean_contexts, dtype=np.float64)
        if contexts.size <= SCALAR_STEPS:
            return np.array([tail.step_s(c) for c in contexts.ravel().tolist()])
        return np.broadcast_to(tail.step_s(contexts.ravel(), np.maximum, np.minimum),
                               (contexts.size,)).copy()

    def decode_step_times_core_s(self, sequences: int, mean_contexts) -> np.ndarray:
        """`decode_step_times_s` by the vectorised core: the fast path's reference."""
        return self._decode_times(
            self._configs(Phase.DECODE, self.per_rank(sequences), 1, mean_contexts,
                              self.group(sequences)))[0]

    def _colocated_decode(self, cfg: Configs) -> tuple[np.ndarray, np.ndarray]:
        step, tpot = step_times(self.model, self._table, cfg, self.eff)[:2]
        return step, tpot

    def _split_decode(self, cfg: Configs) -> tuple[np.ndarray, np.ndarray]:
        lay = self.layout
        step, tpot, _ = af_decode_times(self.model, self._table, cfg, 1, lay.experts_ep,
                                        int(lay.experts_weights), self.eff, lay.same_domain,
                                        lay.attention_per_expert)
        return step, tpot

    def decode_draft_s(self, sequences: int, contexts, mx=max, mn=min):
        """The MTP draft passes of a decode step of `sequences` at `contexts` (a float, or
        an array with `np.maximum`, `np.minimum`), their host gaps included; 0.0 without
        MTP. Another source prices the main pass and asks the roofline for these."""
        return self._tail(Phase.DECODE, sequences, 1).draft_s(contexts, mx, mn)

    def batch_draft_s(self, rank_decodes: int, decodes: int, mean_context: float) -> float:
        """The draft passes of a batch step's `decodes` (`rank_decodes` on the busiest
        attention rank) at their mean context; 0.0 without MTP or decodes."""
        if not self.layout.mtp or not decodes:
            return 0.0
        group = None if self.attention_ranks == 1 else float(decodes)
        return self._batch_tail.draft_tail(float(rank_decodes if group else decodes),
                                           group).draft_s(mean_context)

    @property
    def tokens_per_decode_step(self) -> float:
        """Tokens a sequence gains per decode step on average (1 without MTP)."""
        return self._pricing.accepted

    def kv_bytes(self, tokens: float) -> float:
        return tokens * self.kv_bytes_per_token + self.state_bytes_per_sequence
