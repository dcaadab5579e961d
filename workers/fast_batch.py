"""Scalar pricing of a heterogeneous batch step (`costmodel.batch.batch_step_cost`).

The requests' attention and KV terms are summed request by request, as the core
does, in numpy's pairwise order (`pairwise_sum` for a few requests in Python,
`np.add.reduce` over arrays for many); the token-count terms are those of a uniform
batch at the mean query tokens (`workers.fast_pricing`), memoised on their exact
key. `batch_step_cost` builds its configurations with `Configs.make` (one-element
arrays), so this pricing raises its power as numpy does over arrays.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from costmodel.configs import Configs, Phase
from costmodel.efficiency import Efficiency, OverlapMode
from costmodel.hardware import HardwareTable
from costmodel.model import ModelSpec
from costmodel.terms import ACT_BYTES
from workers.fast_pricing import LayoutTerms, Pricing, Shape, kernel_terms, network_s
from workers.step_tail import StepTail

# numpy's pairwise summation (numpy/_core/src/umath/loops_utils.h.src): blocks of
# at most 128 summed with eight accumulators, halves (rounded to multiples of 8) above.
_PW_BLOCK = 128


def pairwise_sum(a: list[float], lo: int = 0, n: int | None = None) -> float:
    """`np.add.reduce` of a float64 vector, the same double (same order of additions)."""
    count = len(a) - lo if n is None else n
    if count < 8:
        res = 0.0
        for i in range(lo, lo + count):
            res += a[i]
        return res
    if count <= _PW_BLOCK:
        head = a[lo:lo + 8]
        r0, r1, r2, r3, r4, r5, r6, r7 = head
        i, end = 8, count - count % 8
        while i < end:
            j = lo + i
            r0 += a[j]
            r1 += a[j + 1]
            r2 += a[j + 2]
            r3 += a[j + 3]
            r4 += a[j + 4]
            r5 += a[j + 5]
            r6 += a[j + 6]
            r7 += a[j + 7]
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for j in range(lo + i, lo + count):
            res += a[j]
        return res
    n2 = count // 2
    n2 -= n2 % 8
    return pairwise_sum(a, lo, n2) + pairwise_sum(a, lo + n2, count - n2)



class BatchTail:
    """`costmodel.batch.batch_step_cost`'s step time for one worker, request by request
    in Python: `_attention_s`'s per-request sums in numpy's pairwise order, the
    token-count terms of a uniform batch at the mean query tokens."""

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
        self.attention = _BatchAttention(pricing.main)
        self._token_terms = lru_cache(maxsize=4096)(self._token_terms_uncached)

    def _token_terms_uncached(self, all_decode: bool, n: int, q_mean: float):
        """The uniform batch's kernel and network terms: chunked prefill under a token
        budget repeats the same sequences and mean chunk, so they are memoised."""
        lt = self.pricing.main
        shape = Shape(lt, all_decode, n / self.ranks, q_mean, float(self.lay.mtp))
        return kernel_terms(lt, shape), network_s(lt, shape)

    def step_s(self, new_tokens: tuple, cached_tokens: tuple, decoding: tuple) -> float:
        """A step of a few requests (Python floats, numpy's pairwise order)."""
        n = len(cached_tokens)
        q_dec = 1.0 + self.lay.mtp
        q_tok = [q_dec if d else float(t) for t, d in zip(new_tokens, decoding, strict=True)]
        cached = [float(c) for c in cached_tokens]
        q_sum = pairwise_sum(q_tok)
        t_attn = self.attention.time_s(q_tok, q_sum, cached, decoding, self.ranks)
        dec = [c for c, d in zip(cached, decoding, strict=True) if d]
        dec_mean = pairwise_sum(dec) / len(dec) if dec else 0.0
        return self._step(all(decoding), n, q_sum, t_attn, len(dec), dec_mean)

    def mixed_step_s(self, chunk_tokens: list[int], chunk_cached: list[int],
                     decode_contexts: list[int]) -> float:
        """`step_s` of prefill chunks then decodes (a mixed worker's step), the same
        doubles: without a layer of sliding attention, the decodes' terms are the
        same operations on their contexts with their query tokens' factors worked out
        once, and no per-request flag is read."""
        if self.attention.n_slide:
            k, d = len(chunk_tokens), len(decode_contexts)
            return self.step_s(chunk_tokens + [1] * d, chunk_cached + decode_contexts,
                               (False,) * k + (True,) * d)
        q_dec = 1.0 + self.lay.mtp
        chunk_q = [float(t) for t in chunk_tokens]
        chunk_c = [float(c) for c in chunk_cached]
        dec = [float(c) for c in decode_contexts]
        q_sum = pairwise_sum(chunk_q + [q_dec] * len(dec))
        t_attn = self.attention.mixed_time_s(chunk_q, chunk_c, q_dec, dec, q_sum, self.ranks)
        dec_mean = pairwise_sum(dec) / len(dec) if dec else 0.0
        return self._step(not chunk_q, len(chunk_q) + len(dec), q_sum, t_attn, len(dec),
                          dec_mean)

    def step_arrays_s(self, new_tokens: np.ndarray, cached_tokens: np.ndarray,
                      decoding: np.ndarray) -> float:
        """A step of many requests: the per-request terms as numpy arrays, in the order
        `costmodel.batch._attention_s` computes them (a Python loop costs more there)."""
        n = cached_tokens.size
        q_tok = np.where(decoding, 1.0 + self.lay.mtp, new_tokens)
        q_sum = float(np.add.reduce(q_tok))
        t_attn = self.attention.time_arrays_s(q_tok, q_sum, cached_tokens, decoding,
                                              self.ranks)
        dec = cached_tokens[decoding]
        dec_mean = float(np.add.reduce(dec)) / dec.size if dec.size else 0.0
        return self._step(bool(decoding.all()), n, q_sum, t_attn, dec.size, dec_mean)

    def _step(self, all_decode: bool, n: int, q_sum: float, t_attn: float, decodes: int,
              dec_mean: float) -> float:
        eff = self.pricing.eff
        (t_dense, t_always, t_experts, t_head), net_s = self._token_terms(all_decode, n,
                                                                          q_sum / n)
        t_cm = t_attn + t_dense + t_always + t_experts + t_head  # in the core's order
        stage = t_cm + net_s + self.pricing.main.latency_s
        if eff.overlap == OverlapMode.OVERLAP:
            stage = stage - eff.overlap_fraction * min(t_cm, net_s)
        draft_s = 0.0
        if self.lay.mtp and decodes:
            draft_s = self.draft_tail(decodes / self.ranks).draft_s(dec_mean)
        return self.lay.pp * stage + draft_s + eff.step_overhead_s


class _BatchAttention:
    """`costmodel.batch._attention_s` with its layout constants frozen."""

    def __init__(self, lt: LayoutTerms):
        m = lt.m
        self.tp, self.n_full, self.n_slide, self.n_lin = lt.tp, lt.n_full, lt.n_slide, lt.n_lin
        self.attn_w = (lt.n_full + lt.n_slide) * m.attn_params + lt.n_lin * m.linear_params
        self.window = lt.window
        self.f_dec = float(m.attn_flops_per_ctx_token_decode)
        self.f_pre = float(m.attn_flops_per_ctx_token_prefill)
        self.lin_flops, self.kv_layer = m.linear_flops_per_token, lt.kv_layer
        self.state_layer = lt.state_layer
        self.wb_dense, self.n_layers = lt.wb_dense, lt.n_layers
        self.hidden = m.hidden_size
        self.app = lt.eff.activation_passes_per_layer
        self.peak_dense, self.peak_attn, self.hbm_bw = lt.peak_dense, lt.peak_attn, lt.hbm_bw

    def time_arrays_s(self, q_tok: np.ndarray, q_sum: float, cached: np.ndarray,
                      decoding: np.ndarray, ranks: float) -> float:
        tp, nf, ns, w = self.tp, self.n_full, self.n_slide, self.window
        tokens = q_sum / ranks
        ctx_mean = cached + (q_tok + 1.0) / 2.0
        ctx_end = cached + q_tok
        ctx_flops = np.where(decoding, self.f_dec, self.f_pre)
        if ns:
            ctx_mean = nf * ctx_mean + ns * np.minimum(ctx_mean, w)
            ctx_end = nf * ctx_end + ns * np.minimum(ctx_end, w)
        else:  # no sliding layer: its term is +0.0 beside a positive one (`time_s`)
            ctx_mean *= nf
            ctx_end *= nf
        ctx = float(np.add.reduce(q_tok * ctx_flops * ctx_mean)) / ranks / tp
        kv = float(np.add.reduce(self.kv_layer * ctx_end))
        return self._finish(ctx, kv / ranks, tokens, cached.size, ranks)

    def _finish(self, ctx: float, kv_read: float, tokens: float, n: int,
                ranks: float) -> float:
        tp = self.tp
        ctx = ctx + tokens * self.n_lin * self.lin_flops / tp
        proj = 2.0 * tokens * self.attn_w / tp
        kv_read = kv_read + 2.0 * (n / ranks) * self.n_lin * self.state_layer / tp
        attn_bytes = self.attn_w / tp * self.wb_dense + kv_read
        attn_bytes = attn_bytes + tokens * self.hidden * ACT_BYTES * self.app * (
            self.n_layers / tp)
        return max(proj / self.peak_dense + ctx / self.peak_attn, attn_bytes / self.hbm_bw)

    def mixed_time_s(self, chunk_q: list, chunk_c: list, q_dec: float, dec: list,
                     q_sum: float, ranks: float) -> float:
        """`time_s` of chunks (query tokens `chunk_q` after `chunk_c`) then decodes (`q_dec`
        query tokens each, after `dec`), no sliding layer: the same operations, each
        decode's `q * f_dec` and `(q + 1.0) / 2.0` the same doubles worked out once."""
        tp, nf, f_pre, kv_layer = self.tp, self.n_full, self.f_pre, self.kv_layer
        qf, half = q_dec * self.f_dec, (q_dec + 1.0) / 2.0
        ctx_terms = [q * f_pre * (nf * (c + (q + 1.0) / 2.0))
                     for q, c in zip(chunk_q, chunk_c, strict=True)]
        ctx_terms += [qf * (nf * (c + half)) for c in dec]
        kv_terms = [kv_layer * (nf * (c + q)) for q, c in zip(chunk_q, chunk_c, strict=True)]
        kv_terms += [kv_layer * (nf * (c + q_dec)) for c in dec]
        return self._finish(pairwise_sum(ctx_terms) / ranks / tp,
                            pairwise_sum(kv_terms) / ranks, q_sum / ranks, len(kv_terms),
                            ranks)

    def time_s(self, q_tok: list, q_sum: float, cached: list, decoding: tuple,
               ranks: float) -> float:
        tp, nf, ns, w = self.tp, self.n_full, self.n_slide, self.window
        tokens = q_sum / ranks
        f_dec, f_pre, kv_layer = self.f_dec, self.f_pre, self.kv_layer
        if not ns:
            # No sliding layer: `ns * min(...)` is +0.0 beside a positive term (contexts
            # and query tokens are positive), and adding it changes nothing.
            ctx_terms = [q * (f_dec if d else f_pre) * (nf * (c + (q + 1.0) / 2.0))
                         for q, c, d in zip(q_tok, cached, decoding, strict=True)]
            kv_terms = [kv_layer * (nf * (c + q)) for q, c in zip(q_tok, cached, strict=True)]
            return self._finish(pairwise_sum(ctx_terms) / ranks / tp,
                                pairwise_sum(kv_terms) / ranks, tokens, len(cached), ranks)
        ctx_terms, kv_terms = [], []
        for q, c, d in zip(q_tok, cached, decoding, strict=True):
            cm = c + (q + 1.0) / 2.0
            ce = c + q
            ctx_terms.append(q * (f_dec if d else f_pre) * (nf * cm + ns * min(cm, w)))
            kv_terms.append(kv_layer * (nf * ce + ns * min(ce, w)))
        return self._finish(pairwise_sum(ctx_terms) / ranks / tp,
                            pairwise_sum(kv_terms) / ranks, tokens, len(cached), ranks)
