"""A heterogeneous batch step for one worker (`costmodel.batch.batch_step_cost`).

The requests' attention and KV terms are the core's own per-request sums
(`costmodel.batch.batch_attention_s`, on this worker's layout terms as floats and
the requests as arrays); the token-count terms are those of a uniform batch at the
mean query tokens (`workers.fast_pricing`), memoised on their exact key.
`batch_step_cost` builds its configurations with `Configs.make` (one-element
arrays), so this pricing raises its power as numpy does over arrays.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from costmodel.batch import batch_attention_s
from costmodel.configs import Configs, Phase
from costmodel.efficiency import Efficiency
from costmodel.hardware import HardwareTable
from costmodel.model import ModelSpec
from costmodel.terms import overlapped
from workers.fast_pricing import Pricing, Shape, kernel_terms, network_s
from workers.step_tail import StepTail


class BatchTail:
    """`costmodel.batch.batch_step_cost`'s step time for one worker: the requests'
    attention summed request by request, the token-count terms of a uniform batch at
    the mean query tokens."""

    def __init__(self, m: ModelSpec, table: HardwareTable, eff: Efficiency, layout):
        # The configuration `batch_step_cost` builds (Configs.make: one-element columns).
        cfg = Configs.make(phase=int(Phase.DECODE), batch=1.0, new_tokens=1.0, context=0.0,
                           pp=layout.pp, tp=layout.tp, ep=layout.ep,
                           precision=int(layout.weights), kv_precision=int(layout.kv),
                           mtp=layout.mtp, attention_precision=int(layout.attention_precision))
        self.pricing = pricing = Pricing(m, table, cfg, eff)
        self.lay = layout
        self.ranks = max(layout.tp, layout.ep) / layout.tp
        # Per-rank decoding sequences -> their draft passes.
        self.draft_tail = lru_cache(maxsize=1024)(
            lambda batch: StepTail(pricing, Phase.DECODE, batch, 1.0))
        self._token_terms = lru_cache(maxsize=4096)(self._token_terms_uncached)

    def _token_terms_uncached(self, all_decode: bool, n: int, q_mean: float):
        """The uniform batch's kernel and network terms: chunked prefill under a token
        budget repeats the same sequences and mean chunk, so they are memoised."""
        lt = self.pricing.main
        shape = Shape(lt, all_decode, n / self.ranks, q_mean, float(self.lay.mtp))
        return kernel_terms(lt, shape), network_s(lt, shape)

    def step_s(self, new_tokens, cached_tokens, decoding) -> float:
        """A step of requests given as sequences of numbers (and flags)."""
        return self.step_arrays_s(np.array(new_tokens, dtype=np.float64),
                                  np.array(cached_tokens, dtype=np.float64),
                                  np.array(decoding, dtype=bool))

    def mixed_step_s(self, chunk_tokens: list[int], chunk_cached: list[int],
                     decode_contexts: list[int]) -> float:
        """`step_s` of prefill chunks then decodes (a mixed worker's step)."""
        k, d = len(chunk_tokens), len(decode_contexts)
        return self.step_s(chunk_tokens + [1] * d, chunk_cached + decode_contexts,
                           [False] * k + [True] * d)

    def step_arrays_s(self, new_tokens: np.ndarray, cached_tokens: np.ndarray,
                      decoding: np.ndarray) -> float:
        """A step of requests as arrays (float64 tokens, bool flags), the core's way."""
        n = cached_tokens.size
        q_tok = np.where(decoding, 1.0 + self.lay.mtp, new_tokens)
        q_sum = float(np.add.reduce(q_tok))
        lt = self.pricing.main
        t_attn = batch_attention_s(lt.m, lt, lt.eff, q_tok, cached_tokens, decoding,
                                   self.ranks)
        dec = cached_tokens[decoding]
        dec_mean = float(np.add.reduce(dec)) / dec.size if dec.size else 0.0
        eff = self.pricing.eff
        (t_dense, t_always, t_experts, t_head), net_s = self._token_terms(
            bool(decoding.all()), n, q_sum / n)
        t_cm = t_attn + t_dense + t_always + t_experts + t_head  # in the core's order
        stage = overlapped(t_cm, net_s, lt.latency_s, eff)
        draft_s = 0.0
        if self.lay.mtp and dec.size:
            draft_s = self.draft_tail(dec.size / self.ranks).draft_s(dec_mean)
        return self.lay.pp * stage + draft_s + eff.step_overhead_s
