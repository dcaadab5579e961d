"""The measured tables' `CostSource`: a worker's steps read off its layout's curves.

`costmodel.measured.source.price_layout` evaluates the tables' terms once per worker
layout on grids (`costmodel.measured.prices`); here a step is read off them. A step's
kernels are the measured ones; around them, as the roofline prices them
(`workers.pricing.StepPricer`, held for that): the MTP draft passes of a decode step
(the tables have no draft module), the engine's host gap per step
(`costmodel/data/engines.toml`) and the KV bytes a sequence holds.

Sequences are placed on the attention ranks as the roofline places them: a uniform
fill or decode of `n` sequences puts `ceil(n / ranks)` on the slowest rank, whose
kernels, LM head and attention run on its own tokens while the experts and their
exchange see every rank's; a heterogeneous batch step places request i on rank
i mod ranks and lasts as long as its slowest rank. A decode step with MTP verifies
1 + mtp tokens a sequence (its GEMMs, experts and LM head on those; its attention
reads each sequence's KV once, as a multi-query decode kernel does).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from costmodel.configs import Phase
from costmodel.measured.source import MeasuredLayout
from workers.pricing import BATCH_MEMO_REQUESTS, StepPricer, batch_request_key


class MeasuredPricer:
    """A `CostSource` (workers.cost_source) priced from measured kernel tables."""

    def __init__(self, roofline: StepPricer, prices: MeasuredLayout):
        self.roofline = roofline
        self.prices = prices
        self.eff = roofline.eff
        self.layout = roofline.layout
        self.attention_ranks = roofline.attention_ranks
        self._query = 1.0 + self.layout.mtp  # tokens a decode step verifies per sequence
        self._overhead_s = self.eff.step_overhead_s
        self._accepted = roofline.tokens_per_decode_step
        # As the roofline's (workers.pricing): fills repeat their shapes, small batch steps
        # repeat their requests.
        self._fill = lru_cache(maxsize=65536)(self._fill_uncached)
        self._batch = lru_cache(maxsize=65536)(self._batch_uncached)

    # Fills ------------------------------------------------------------------------------

    def _fill_uncached(self, phase: Phase, sequences: int, new_tokens: int,
                       cached_tokens: int) -> tuple[float, float]:
        c = self.prices.prefill
        b = float(math.ceil(sequences / self.attention_ranks))
        tokens = b * new_tokens
        attention = c.chunk_attention_s(b, float(new_tokens), float(cached_tokens))
        step_s = (c.rank_s(tokens, b, attention) + c.group_s(tokens, float(sequences * new_tokens))
                  + self._overhead_s)
        return step_s, step_s / self.layout.pp

    def fill_s(self, phase: Phase, sequences: int, mean_new_tokens: float,
               mean_cached_tokens: float) -> tuple[float, float]:
        return self._fill(phase, int(sequences), round(mean_new_tokens), round(mean_cached_tokens))

    def fill_once_s(self, phase: Phase, sequences: int, mean_new_tokens: float,
                    mean_cached_tokens: float) -> float:
        return self._fill_uncached(phase, int(sequences), round(mean_new_tokens),
                                   round(mean_cached_tokens))[0]

    def recompute_s(self, tokens: int) -> float:
        return self.fill_s(Phase.PREFILL, 1, tokens, 0)[0]

    # Heterogeneous batch steps ----------------------------------------------------------

    def fill_step_s(self, new_tokens, cached_tokens, decoding=False) -> tuple[float, float]:
        price = (self._batch if len(cached_tokens) <= BATCH_MEMO_REQUESTS
                 else self._batch_uncached)
        return price(*batch_request_key(new_tokens, cached_tokens, decoding))

    def mixed_step_s(self, chunk_tokens: list[int], chunk_cached: list[int],
                     decode_contexts: list[int]) -> tuple[float, float]:
        d = len(decode_contexts)
        return self._batch_uncached(tuple(chunk_tokens) + (1,) * d,
                                    tuple(chunk_cached) + tuple(decode_contexts),
                                    (False,) * len(chunk_tokens) + (True,) * d)

    def _batch_uncached(self, new_tokens: tuple, cached_tokens: tuple,
                        decoding: tuple) -> tuple[float, float]:
        """Request i on rank i mod ranks; a rank's prefill chunks each priced as its own
        causal chunk, its decodes as one decode batch at their mean context."""
        all_decode = all(decoding)
        pre, dec = self.prices.prefill, self.prices.decode
        c = dec if all_decode else pre
        ranks = self.attention_ranks
        slowest, group, most_decodes, decodes, context_sum = -1.0, 0.0, 0, 0, 0.0
        slowest_tokens = 0.0
        for r in range(min(ranks, len(new_tokens))):
            tokens = attention = 0.0
            rank_decodes, rank_context = 0, 0.0
            for n, cached, decodes_one in zip(new_tokens[r::ranks], cached_tokens[r::ranks],
                                              decoding[r::ranks], strict=True):
                if decodes_one:
                    tokens += self._query
                    rank_decodes += 1
                    rank_context += cached
                else:
                    tokens += n
                    attention += pre.chunk_attention_s(1.0, float(n), float(cached))
            if rank_decodes:
                attention += dec.attention.at(float(rank_decodes), rank_context / rank_decodes)
            # The LM head's rows: one a prefill chunk, every verified token of a decode.
            rows = len(new_tokens[r::ranks]) - rank_decodes + rank_decodes * self._query
            rank_s = c.rank_s(tokens, rows, attention)
            if rank_s > slowest:
                slowest, slowest_tokens = rank_s, tokens
            group += tokens
            decodes += rank_decodes
            most_decodes = max(most_decodes, rank_decodes)
            context_sum += rank_context
        draft_s = self.roofline.batch_draft_s(most_decodes, decodes,
                                              context_sum / decodes if decodes else 0.0)
        step_s = slowest + c.group_s(slowest_tokens, group) + draft_s + self._overhead_s
        return step_s, step_s / self.layout.pp

    # Decode runs ------------------------------------------------------------------------

    def _decode_kernels(self, sequences: int) -> tuple[float, float]:
        """(the step's kernels but attention, the slowest rank's sequences)."""
        c = self.prices.decode
        b = float(math.ceil(sequences / self.attention_ranks))
        tokens = b * self._query
        return c.rank_s(tokens, tokens, 0.0) + c.group_s(tokens, sequences * self._query), b

    def decode_step_times_s(self, sequences: int, mean_contexts) -> np.ndarray:
        """Step times (not per token) of decode steps starting at `mean_contexts`."""
        c = self.prices.decode
        kernels_s, b = self._decode_kernels(sequences)
        contexts = np.asarray(mean_contexts, dtype=np.float64).ravel()
        drafts = self.roofline.decode_draft_s(sequences, contexts, np.maximum, np.minimum)
        return kernels_s + c.layers * c.attention.row(b, contexts) + drafts + self._overhead_s

    def decode_steps_s(self, sequences: int, mean_context: float, steps: int) -> np.ndarray:
        """Time per output token of `steps` steps from `mean_context`, one token a
        sequence a step."""
        contexts = np.arange(steps, dtype=np.float64) + mean_context
        step_s = self.decode_step_times_s(sequences, contexts)
        return step_s / self._accepted if self._accepted != 1.0 else step_s

    def decode_run_ends_s(self, start_s: float, sequences: int, mean_context: float,
                          steps: int) -> np.ndarray:
        ends = np.add.accumulate(self.decode_steps_s(sequences, mean_context, steps))
        ends += start_s
        return ends

    def kv_bytes(self, tokens: float) -> float:
        return self.roofline.kv_bytes(tokens)
