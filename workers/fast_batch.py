"""A heterogeneous batch step for one worker (`costmodel.batch.batch_step_cost`).

The requests' attention and KV terms are the core's own per-request terms
(`costmodel.batch.request_attention_terms`, on this worker's layout terms as floats),
request by request in Python floats summed in numpy's pairwise order
(`workers.pairwise`) for a step of a few requests, over arrays for a big one; the
token-count terms are those of a uniform batch at the
mean query tokens (`workers.fast_pricing`), memoised on their exact key. With
data-parallel attention, request i is on rank i mod ranks (`costmodel.batch.placed`)
and the step is its slowest rank's, as the core prices it.
`batch_step_cost` builds its configurations with `Configs.make` (one-element
arrays), so this pricing raises its power as numpy does over arrays.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from costmodel.batch import batch_attention_from_sums, batch_attention_s, placed
from costmodel.configs import Configs, Phase
from costmodel.efficiency import Efficiency
from costmodel.hardware import HardwareTable
from costmodel.model import ModelSpec
from costmodel.terms import overlapped, request_terms
from workers.fast_pricing import LayoutTerms, Pricing, Shape, kernel_terms, network_s
from workers.pairwise import pairwise_sum
from workers.step_tail import StepTail

# Steps of at most this many requests per attention rank are priced request by request
# in Python floats; bigger ones as arrays (a request costs ~1 us in the loop, an array
# operation ~1 us, and the array path makes a few per rank: DeepSeek-V3 on 72 GB200,
# DEP72 at 512 users, ~7 requests a rank, took 3.6 s of CPU a point on arrays and 2.1 s
# in the loop).
SCALAR_REQUESTS = 32


def request_lists(lt: LayoutTerms, q_dec: float, new_tokens, cached_tokens, decoding,
                  ctx_terms: list, kv_terms: list, q_tok: list, dec: list,
                  flags: list) -> None:
    """Appends each request's attention FLOPs and KV bytes (`costmodel.terms.request_terms`),
    query tokens and decode flag, and each decoding request's context, as Python floats
    (compiled: on C doubles, `workers/fast_batch.pxd`)."""
    m = lt.m
    f_dec, f_pre = m.attn_flops_per_ctx_token_decode, m.attn_flops_per_ctx_token_prefill
    n_full, n_slide, window, kv_layer = lt.n_full, lt.n_slide, lt.window, lt.kv_layer
    sliding = m.n_sliding_layers > 0
    for t, c, d in zip(new_tokens, cached_tokens, decoding, strict=True):
        q, cached = (q_dec if d else float(t)), float(c)
        ctx, kv = request_terms(q, cached, f_dec if d else f_pre, n_full, n_slide, window,
                                kv_layer, sliding, min)
        ctx_terms.append(ctx)
        kv_terms.append(kv)
        q_tok.append(q)
        flags.append(1 if d else 0)
        if d:
            dec.append(cached)


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
        self.ranks = max(layout.tp, layout.ep) // layout.tp
        # (decoding sequences on the rank with the most, over all ranks) -> their drafts.
        self.draft_tail = lru_cache(maxsize=1024)(
            lambda batch, group: StepTail(pricing, Phase.DECODE, batch, 1.0, group))
        self._token_terms = lru_cache(maxsize=4096)(self._token_terms_uncached)

    def _token_terms_uncached(self, all_decode: bool, n: int, q_mean: float,
                              group_tokens: float | None):
        """The uniform batch's kernel and network terms on one rank of `n` sequences:
        chunked prefill under a token budget repeats the same sequences and mean chunk,
        so they are memoised."""
        lt = self.pricing.main
        shape = Shape(lt, all_decode, float(n), q_mean, float(self.lay.mtp), group_tokens)
        return kernel_terms(lt, shape), network_s(lt, shape)

    def step_s(self, new_tokens, cached_tokens, decoding) -> float:
        """A step of requests given as sequences of numbers (and flags): a few a rank
        request by request in Python floats, more as arrays (`step_arrays_s`), the same
        doubles."""
        if len(cached_tokens) > SCALAR_REQUESTS * self.ranks:
            return self.step_arrays_s(np.array(new_tokens, dtype=np.float64),
                                      np.array(cached_tokens, dtype=np.float64),
                                      np.array(decoding, dtype=bool))
        lt = self.pricing.main
        m = lt.m
        ctx_terms, kv_terms, q_tok, dec, flags = [], [], [], [], []
        request_lists(lt, 1.0 + self.lay.mtp, new_tokens, cached_tokens, decoding,
                      ctx_terms, kv_terms, q_tok, dec, flags)
        dec_mean = pairwise_sum(dec) / len(dec) if dec else 0.0
        all_decode = len(dec) == len(q_tok)
        ranks = self.ranks
        if ranks == 1:
            q_sum = pairwise_sum(q_tok)
            t_attn = batch_attention_from_sums(m, lt, lt.eff, q_sum, pairwise_sum(ctx_terms),
                                               pairwise_sum(kv_terms), len(q_tok), 1.0)
            return self._step(all_decode, [(len(q_tok), q_sum, t_attn, len(dec))], None,
                              len(dec), dec_mean)
        rows = []
        for r in range(min(ranks, len(q_tok))):  # request i on rank i mod ranks
            q_r = q_tok[r::ranks]
            q_sum_r = pairwise_sum(q_r)
            t_attn = batch_attention_from_sums(
                m, lt, lt.eff, q_sum_r, pairwise_sum(ctx_terms[r::ranks]),
                pairwise_sum(kv_terms[r::ranks]), len(q_r), 1.0)
            rows.append((len(q_r), q_sum_r, t_attn, sum(flags[r::ranks])))
        return self._step(all_decode, rows, pairwise_sum(q_tok), len(dec), dec_mean)

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
        lt = self.pricing.main
        ranks = self.ranks
        rows = []
        for idx in placed(n, ranks):
            q_r = q_tok[idx]
            rows.append((idx.size, float(np.add.reduce(q_r)), batch_attention_s(
                lt.m, lt, lt.eff, q_r, cached_tokens[idx], decoding[idx], 1.0),
                int(decoding[idx].sum())))
        dec = cached_tokens[decoding]
        dec_mean = float(np.add.reduce(dec)) / dec.size if dec.size else 0.0
        group = None if ranks == 1 else float(np.add.reduce(q_tok))
        return self._step(bool(decoding.all()), rows, group, dec.size, dec_mean)

    def _step(self, all_decode: bool, rows: list, group: float | None, decodes: int,
              dec_mean: float) -> float:
        """`rows`: per attention rank (sequences, query tokens, attention time, decodes);
        `group`: the query tokens over every rank (None: one rank)."""
        eff = self.pricing.eff
        # The slowest rank (`costmodel.batch.batch_step_cost`): the most attention work
        # or the most tokens, the first of equals, each candidate priced in full.
        by_attn = max(range(len(rows)), key=lambda r: rows[r][2])
        by_tokens = max(range(len(rows)), key=lambda r: rows[r][1])
        stage = -1.0
        for r in sorted({by_attn, by_tokens}):
            n, q_sum, t_attn = rows[r][:3]
            (t_dense, t_always, t_experts, t_head), net_s = self._token_terms(
                all_decode, n, q_sum / n, group)
            t_cm = t_attn + t_dense + t_always + t_experts + t_head  # in the core's order
            stage = max(stage, overlapped(t_cm, net_s, self.pricing.main.latency_s, eff))
        draft_s = 0.0
        if self.lay.mtp and decodes:
            if group is None:
                draft_s = self.draft_tail(float(decodes), None).draft_s(dec_mean)
            else:
                most = max(row[3] for row in rows)
                draft_s = self.draft_tail(float(most), float(decodes)).draft_s(dec_mean)
        return self.lay.pp * stage + draft_s + eff.step_overhead_s
