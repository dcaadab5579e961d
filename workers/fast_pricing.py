"""Scalar pricing: the cost core's step time without numpy's per-call overhead.

A worker prices one configuration at a time, or one short run of decode steps:
the vectorised core (`costmodel.phase`) spends ~200 ufunc calls on it whatever
the length. For a fixed worker, phase and batch, almost every term of a step is
independent of the sequences' context; only attention (its context FLOPs and KV
reads) and what is added after it depend on it. So the context-free terms are
taken once from the vectorised core itself (`_Shape`, `_Kernels`, `_network`,
`_latency`, evaluated on one configuration, kept as Python floats) and the
context-dependent tail is re-evaluated here with the core's own operations in
the core's own order. IEEE-754 addition, multiplication, division, min and max
give the same double whether numpy or Python performs them, so the result is
bit-for-bit the core's (`tests/property/test_pricing_fast_path.py` checks it).

The tail takes a float or a numpy array of contexts (`mx`/`mn` are `max`/`min` or
`np.maximum`/`np.minimum`): a long run of steps is cheaper as ~30 array operations
than as a Python loop.

Nothing here raises a power: numpy's vectorised `power` (SVML on AVX-512) and
libm's `pow` differ in the last bit, so `_distinct` stays in the core's constants.

A heterogeneous batch step (`costmodel.batch`) sums its requests' attention with
numpy's pairwise summation, reproduced by `pairwise_sum`; its token-count terms
are memoised per (phase, sequences, mean query tokens) from the core.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from costmodel.batch import batch_token_terms
from costmodel.draft import draft_pass_parts, mtp_module
from costmodel.efficiency import Efficiency, OverlapMode
from costmodel.hardware import HardwareTable
from costmodel.kernels import ACT_BYTES, Phase, _Kernels, _latency, _network, _Shape
from costmodel.model import ModelSpec
from costmodel.mtp import expected_tokens_per_step

# numpy's pairwise summation (numpy/_core/src/umath/loops_utils.h.src): blocks of
# at most 128 summed with eight accumulators, halves (rounded to multiples of 8) above.
_PW_BLOCK = 128


def pairwise_sum(a: list[float], lo: int = 0, n: int | None = None) -> float:
    """`np.add.reduce` of a float64 vector, the same double (same order of additions)."""
    n = len(a) - lo if n is None else n
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    if n <= _PW_BLOCK:
        r0, r1, r2, r3, r4, r5, r6, r7 = a[lo:lo + 8]
        i, end = 8, n - n % 8
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
        for j in range(lo + i, lo + n):
            res += a[j]
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return pairwise_sum(a, lo, n2) + pairwise_sum(a, lo + n2, n - n2)


def _f(x) -> float:
    return float(np.ravel(x)[0])


class AttentionTerms:
    """A stage's attention roofline (`_Kernels`' first term) as a function of context,
    for one shape `v` whose context-free quantities are frozen."""

    __slots__ = (
        "a_ctx",
        "act_bytes",
        "half",
        "hbm_bw",
        "kv_seq",
        "lin_flops",
        "n_full",
        "n_slide",
        "peak_attn",
        "proj_s",
        "q_tok",
        "state",
        "tp",
        "w_bytes",
        "window",
    )

    def __init__(self, m: ModelSpec, v: _Shape, eff: Efficiency, decode: bool):
        self.tp = tp = _f(v.tp)
        t_rank = _f(v.t_rank)
        n_full, n_slide, n_lin = _f(v.n_full), _f(v.n_slide), _f(v.n_lin)
        self.q_tok = q_tok = _f(v.q_tok)
        self.half = (q_tok + 1.0) / 2.0
        ctx_flops = m.attn_flops_per_ctx_token_decode if decode else (
            m.attn_flops_per_ctx_token_prefill)
        self.a_ctx = t_rank * ctx_flops
        self.n_full, self.n_slide, self.window = n_full, n_slide, float(v.window)
        self.lin_flops = t_rank * n_lin * m.linear_flops_per_token / tp
        attn_w = (n_full + n_slide) * m.attn_params + n_lin * m.linear_params
        peak_dense, wb_dense = _f(v.peak_dense), _f(v.wb_dense)
        self.proj_s = 2.0 * t_rank * attn_w / tp / peak_dense
        self.kv_seq = _f(v.n_seq) * _f(v.kv_layer)
        self.state = 2.0 * _f(v.n_seq) * n_lin * float(v.state_layer) / tp
        self.w_bytes = attn_w / tp * wb_dense
        self.act_bytes = (t_rank * float(m.hidden_size) * ACT_BYTES
                          * eff.activation_passes_per_layer * _f(v.n_layers) / tp)
        self.peak_attn, self.hbm_bw = _f(v.peak_attn), _f(v.hbm_bw)

    def time_s(self, context, mx=max, mn=min):
        """`_Kernels.t_attn` at `context` (float, or array with np.maximum/np.minimum)."""
        ctx_mean = context + self.half
        ctx_end = context + self.q_tok
        flops = self.a_ctx * (self.n_full * ctx_mean + self.n_slide * mn(ctx_mean, self.window)
                              ) / self.tp
        flops = flops + self.lin_flops
        kv_read = self.kv_seq * (self.n_full * ctx_end + self.n_slide * mn(ctx_end, self.window))
        kv_read = kv_read + self.state
        attn_bytes = self.w_bytes + kv_read
        attn_bytes = attn_bytes + self.act_bytes
        return mx(self.proj_s + flops / self.peak_attn, attn_bytes / self.hbm_bw)


class PassTail:
    """One pass through a stage (the main pass, or one MTP draft pass): attention as
    a function of context, then the frozen terms added in the core's order, network,
    fixed latencies and the overlap rule."""

    __slots__ = ("after", "attn", "latency_s", "network_s", "overlap")

    def __init__(self, attn: AttentionTerms, after: tuple[float, ...], network_s: float,
                 latency_s: float, eff: Efficiency):
        self.attn, self.after = attn, after
        self.network_s, self.latency_s = network_s, latency_s
        self.overlap = eff.overlap_fraction if eff.overlap == OverlapMode.OVERLAP else None

    def time_s(self, context, mx=max, mn=min):
        t_cm = self.attn.time_s(context, mx, mn)
        for term in self.after:
            t_cm = t_cm + term
        stage_s = t_cm + self.network_s + self.latency_s
        if self.overlap is not None:
            stage_s = stage_s - self.overlap * mn(t_cm, self.network_s)
        return stage_s


def _main_pass(m: ModelSpec, table: HardwareTable, cfg, eff: Efficiency) -> PassTail:
    v = _Shape(m, table, cfg, eff)
    k = _Kernels(m, v, eff)
    decode = bool(np.ravel(v.decode)[0])
    after = (_f(k.t_dense), _f(k.t_always), _f(k.t_experts), _f(k.t_head))
    return PassTail(AttentionTerms(m, v, eff, decode), after, _f(_network(m, v)[2]),
                    _f(_latency(m, v, eff)), eff)


def _draft_pass(m: ModelSpec, table: HardwareTable, cfg, eff: Efficiency, q_tok) -> PassTail:
    block = mtp_module(m)
    v, k, extra, network_s, latency_s = draft_pass_parts(block, table, cfg, eff, q_tok)
    t_head, t_proj = extra[:2]
    after = (_f(k.t_dense), _f(k.t_always), _f(k.t_experts), _f(t_head), _f(t_proj))
    return PassTail(AttentionTerms(block, v, eff, True), after, _f(network_s),
                    _f(latency_s), eff)


class StepTail:
    """(step_time_s, tpot_s) of one worker's steps at a given phase, batch and new
    tokens, as `costmodel.phase.step_times` gives them, for any context."""

    __slots__ = ("accepted", "decode", "drafts", "first", "later", "main", "overhead_s", "pp")

    def __init__(self, m: ModelSpec, table: HardwareTable, cfg, eff: Efficiency):
        self.main = _main_pass(m, table, cfg, eff)
        self.pp = _f(cfg.pp)
        self.overhead_s = eff.step_overhead_s
        self.decode = int(_f(cfg.phase)) == Phase.DECODE
        accepted = expected_tokens_per_step(cfg.mtp, eff.mtp_acceptance)
        self.accepted = _f(accepted)
        self.drafts = _f(cfg.mtp) if self.decode else 0.0
        self.first = self.later = None
        if self.drafts > 0:
            self.first = _draft_pass(m, table, cfg, eff, accepted)
            self.later = _draft_pass(m, table, cfg, eff, 1.0)

    def draft_s(self, context, mx=max, mn=min):
        if self.first is None:
            return 0.0
        rest = mx(self.drafts - 1.0, 0.0)
        return self.first.time_s(context, mx, mn) + rest * self.later.time_s(context, mx, mn)

    def step_s(self, context, mx=max, mn=min):
        stage_s = self.main.time_s(context, mx, mn)
        return self.pp * stage_s + self.draft_s(context, mx, mn) + self.overhead_s

    def tpot_s(self, step_s):
        return step_s / self.accepted if self.decode else step_s


class BatchTail:
    """`costmodel.batch.batch_step_cost`'s step time for one layout, request by request
    in Python: `_attention_s`'s per-request sums in numpy's pairwise order, the
    token-count terms (`batch_token_terms`) memoised on their exact key."""

    def __init__(self, m: ModelSpec, table: HardwareTable, eff: Efficiency, layout,
                 draft_tail):
        self.m, self.table, self.eff, self.lay = m, table, eff, layout
        self.ranks = max(layout.tp, layout.ep) / layout.tp
        self.draft_tail = draft_tail  # per-rank decoding sequences -> StepTail
        self._terms = lru_cache(maxsize=4096)(self._terms_uncached)
        self._consts = None

    def _terms_uncached(self, all_decode: bool, n: int, q_mean: float):
        lay = self.lay
        v, k, network_s, latency_s = batch_token_terms(
            self.m, self.table, all_decode, n / self.ranks, q_mean, 0.0, pp=lay.pp, tp=lay.tp,
            ep=lay.ep, precision=lay.weights, kv_precision=lay.kv, mtp=lay.mtp,
            attention_precision=lay.attention_precision, eff=self.eff)
        if self._consts is None:
            self._consts = _BatchAttention(self.m, v, self.eff)
        after = (_f(k.t_dense), _f(k.t_always), _f(k.t_experts), _f(k.t_head))
        overlap = self.eff.overlap_fraction if self.eff.overlap == OverlapMode.OVERLAP else None
        return after, _f(network_s), _f(latency_s), overlap

    def step_s(self, new_tokens: tuple, cached_tokens: tuple, decoding: tuple) -> float:
        n = len(cached_tokens)
        mtp = self.lay.mtp
        q_dec = 1.0 + mtp
        q_tok = [q_dec if d else float(t) for t, d in zip(new_tokens, decoding, strict=True)]
        cached = [float(c) for c in cached_tokens]
        all_decode = all(decoding)
        q_sum = pairwise_sum(q_tok)
        after, network_s, latency_s, overlap = self._terms(all_decode, n, q_sum / n)
        t_cm = self._consts.time_s(q_tok, q_sum, cached, decoding, self.ranks)
        for term in after:
            t_cm = t_cm + term
        stage = t_cm + network_s + latency_s
        if overlap is not None:
            stage = stage - overlap * min(t_cm, network_s)
        draft_s = 0.0
        if mtp and any(decoding):
            dec = [c for c, d in zip(cached, decoding, strict=True) if d]
            draft_s = self.draft_tail(len(dec) / self.ranks).draft_s(
                pairwise_sum(dec) / len(dec))
        return self.lay.pp * stage + draft_s + self.eff.step_overhead_s


class _BatchAttention:
    """`costmodel.batch._attention_s` with its layout constants frozen."""

    def __init__(self, m: ModelSpec, v: _Shape, eff: Efficiency):
        self.tp = _f(v.tp)
        n_full, n_slide, n_lin = _f(v.n_full), _f(v.n_slide), _f(v.n_lin)
        self.n_full, self.n_slide, self.n_lin = n_full, n_slide, n_lin
        self.attn_w = (n_full + n_slide) * m.attn_params + n_lin * m.linear_params
        self.window = float(v.window)
        self.f_dec = float(m.attn_flops_per_ctx_token_decode)
        self.f_pre = float(m.attn_flops_per_ctx_token_prefill)
        self.lin_flops, self.kv_layer = m.linear_flops_per_token, _f(v.kv_layer)
        self.state_layer = float(v.state_layer)
        self.wb_dense, self.n_layers = _f(v.wb_dense), _f(v.n_layers)
        self.hidden = m.hidden_size
        self.app = eff.activation_passes_per_layer
        self.peak_dense, self.peak_attn = _f(v.peak_dense), _f(v.peak_attn)
        self.hbm_bw = _f(v.hbm_bw)

    def time_s(self, q_tok: list, q_sum: float, cached: list, decoding: tuple,
               ranks: float) -> float:
        tp, nf, ns, w = self.tp, self.n_full, self.n_slide, self.window
        tokens = q_sum / ranks
        ctx_terms, kv_terms = [], []
        for q, c, d in zip(q_tok, cached, decoding, strict=True):
            cm = c + (q + 1.0) / 2.0
            ce = c + q
            ctx_terms.append(q * (self.f_dec if d else self.f_pre) * (nf * cm + ns * min(cm, w)))
            kv_terms.append(self.kv_layer * (nf * ce + ns * min(ce, w)))
        ctx = pairwise_sum(ctx_terms) / ranks / tp
        ctx = ctx + tokens * self.n_lin * self.lin_flops / tp
        proj = 2.0 * tokens * self.attn_w / tp
        kv_read = pairwise_sum(kv_terms) / ranks
        kv_read = kv_read + 2.0 * (len(cached) / ranks) * self.n_lin * self.state_layer / tp
        attn_bytes = self.attn_w / tp * self.wb_dense + kv_read
        attn_bytes = attn_bytes + tokens * self.hidden * ACT_BYTES * self.app * (
            self.n_layers / tp)
        return max(proj / self.peak_dense + ctx / self.peak_attn, attn_bytes / self.hbm_bw)
