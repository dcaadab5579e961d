"""Scalar pricing: the cost core's step time without numpy's per-call overhead.

A worker prices one configuration at a time, or one short run of decode steps:
the vectorised core (`costmodel.phase`) spends ~200 ufunc calls on it whatever
the length. Here the same roofline is evaluated in Python floats:

- what depends on the model, hardware, layout and efficiency only (`LayoutTerms`:
  bandwidths, peaks, layers per stage, bytes per element, fixed latencies, the
  all-to-all's reach) is taken once from the core's own `_Shape`, `_latency` and
  `_a2a_reach`;
- what depends on the batch (`Shape`, `kernel_terms`, `network_s`) and on the
  context (`AttentionTerms`) is re-evaluated with the core's operations in the
  core's order (`costmodel/kernels.py`, `costmodel/draft.py`, `costmodel/batch.py`).

IEEE-754 addition, multiplication, division, min and max give the same double
whether numpy or Python performs them, so the result is bit-for-bit the core's
(`tests/property/test_pricing_fast_path.py` checks it). The one power, the
expected distinct experts a batch touches (`_distinct`), is still raised by
numpy on a one-element array: numpy's vectorised `power` (SVML on AVX-512)
and libm's `pow` differ in the last bit.

The passes (`AttentionTerms`, `PassTail`) take a float or a numpy array of contexts
(`mx`/`mn` are `max`/`min` or `np.maximum`/`np.minimum`): a long run of steps is
cheaper as ~30 array operations than as a Python loop. A step's passes at any
context, and runs of steps: `workers.step_tail`. Heterogeneous batch steps:
`workers.fast_batch`.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from costmodel.configs import Phase
from costmodel.draft import mtp_module
from costmodel.efficiency import Efficiency, OverlapMode
from costmodel.hardware import HardwareTable
from costmodel.kernels import Shape as CoreShape
from costmodel.model import ModelSpec
from costmodel.mtp import expected_tokens_per_step
from costmodel.precision import Precision
from costmodel.terms import ACT_BYTES, fixed_latency


def _f(x) -> float:
    return float(np.ravel(x)[0])


class LayoutTerms:
    """What `_Shape` holds that depends on the model, hardware, layout and efficiency
    only, as floats taken from the core's own `_Shape` of one configuration."""

    _NAMES = ("hbm_bw", "su_bw", "so_bw", "domain", "pp", "tp", "ep", "width", "attn_ranks",
              "n_full", "n_slide", "n_lin", "n_dense", "n_moe", "n_layers", "wb_dense",
              "wb_exp", "peak_dense", "peak_exp", "peak_attn", "kv_layer")

    def __init__(self, m: ModelSpec, table: HardwareTable, cfg, eff: Efficiency):
        v = CoreShape(m, table, cfg, eff)
        self.m, self.eff = m, eff
        for name in self._NAMES:
            setattr(self, name, _f(getattr(v, name)))
        self.state_layer, self.window = float(v.state_layer), float(v.window)
        self.mtp = _f(cfg.mtp)
        self.latency_s = _f(fixed_latency(m, v, eff))  # no term of it depends on the batch
        self.d = float(m.hidden_size)
        self.head_w = m.vocab_size * self.d
        self.disp = 1.0 if int(_f(v.wprec)) >= Precision.FP8 else 2.0
        # The model's per-layer figures (`ModelSpec` properties) and what the kernels work
        # out from them that no batch changes: the weights and their read times, with the
        # core's operations in its order (`kernel_terms`, `AttentionTerms`).
        tp, wb, hbm_bw = self.tp, self.wb_dense, self.hbm_bw
        self.dense_w = self.n_dense * m.dense_ffn_params
        self.dense_read_s = self.dense_w / tp * wb / hbm_bw
        self.head_read_s = self.head_w / tp * wb / hbm_bw
        self.ctx_flops_decode = m.attn_flops_per_ctx_token_decode
        self.ctx_flops_prefill = m.attn_flops_per_ctx_token_prefill
        self.linear_flops = m.linear_flops_per_token
        self.attn_w = (self.n_full + self.n_slide) * m.attn_params + self.n_lin * m.linear_params
        self.attn_bytes = self.attn_w / tp * wb
        # The core's tokens per stage are a numpy scalar when every configuration column is
        # 0-d (the pricer's own configurations): numpy then raises the power with libm's
        # pow, as Python does; over arrays (Configs.make) with its vectorised power.
        self.array_power = any(np.ndim(getattr(cfg, k)) > 0
                               for k in ("phase", "batch", "new_tokens", "mtp", "tp", "ep"))
        if m.moe is not None:
            self.miss = min(max(1.0 - m.moe.top_k / m.moe.routed_experts, 0.0), 1.0)
            self.miss64 = np.float64(self.miss)
            rr, rn, out = v.remote_ranks, v.remote_nodes, v.outside
            self.remote_ranks, self.remote_nodes, self.outside = _f(rr), _f(rn), _f(out)
            self.experts_per_rank = _f(np.ceil(m.moe.routed_experts / v.ep))
            self.split = _f(np.maximum(1.0, v.tp / v.ep))
            self.always_w = self.n_moe * m.moe_always_params
            self.always_read_s = self.always_w / tp * wb / hbm_bw
            self.expert_params = m.expert_params


class Shape:
    """`_Shape`'s batch-dependent quantities of one configuration, as floats."""

    __slots__ = ("decode", "n_seq", "q_tok", "t_group", "t_rank")

    def __init__(self, lt: LayoutTerms, decode: bool, n_seq: float, new_tokens: float,
                 mtp: float):
        self.decode, self.n_seq = decode, n_seq
        self.q_tok = 1.0 + mtp if decode else new_tokens
        self.t_rank = n_seq * self.q_tok
        self.t_group = self.t_rank * lt.attn_ranks


def kernel_terms(lt: LayoutTerms, s: Shape) -> tuple[float, float, float, float]:
    """`_Kernels`' dense FFN, router and shared experts, routed experts and LM head
    times (`costmodel/kernels.py`, in its order of operations)."""
    m, tp, hbm_bw = lt.m, lt.tp, lt.hbm_bw
    dense_flops = 2.0 * s.t_rank * lt.dense_w / tp
    t_dense = max(dense_flops / lt.peak_dense, lt.dense_read_s)
    t_always = t_experts = 0.0
    if m.moe is not None:
        mo = m.moe
        always_flops = 2.0 * s.t_rank * lt.always_w / tp
        t_always = max(always_flops / lt.peak_dense, lt.always_read_s)
        if lt.array_power:
            # `_distinct(routed, top_k, np.array([t_group]))`: its power, a numpy scalar
            # raised to a one-element array, without its clip and conversions (`miss` is
            # the clipped share, the same double).
            miss_pow = float(np.power(lt.miss64, np.array([s.t_group]))[0])
            hit = mo.routed_experts * (1.0 - miss_pow)
        else:
            hit = mo.routed_experts * (1.0 - lt.miss ** s.t_group)
        touched = hit * lt.experts_per_rank / mo.routed_experts
        exp_bytes = lt.n_moe * touched * lt.expert_params / lt.split * lt.wb_exp
        exp_flops = 2.0 * lt.n_moe * s.t_group * mo.top_k / lt.ep * lt.expert_params / lt.split
        exp_flops = exp_flops * lt.eff.ep_imbalance
        t_experts = max(exp_flops / lt.peak_exp, exp_bytes / hbm_bw)
    head_tok = s.t_rank if s.decode else s.n_seq
    head_flops = 2.0 * head_tok * lt.head_w / tp
    t_head = max(head_flops / lt.peak_dense, lt.head_read_s)
    return t_dense, t_always, t_experts, t_head


def network_s(lt: LayoutTerms, s: Shape) -> float:
    """`_network`'s time: TP all-reduces, the expert all-to-all and the PP hop."""
    d, tp, width = lt.d, lt.tp, lt.width
    su = 2.0 * (tp - 1) / tp * s.t_rank * d * ACT_BYTES if tp > 1 else 0.0
    su = su * 2.0 * lt.n_layers
    so = 0.0
    if lt.m.moe is not None:
        per_token = d * (lt.disp + ACT_BYTES)
        sent = s.t_group / width
        rr = lt.remote_ranks
        if s.decode:
            su = su + lt.n_moe * sent * rr * (1.0 - lt.outside) * per_token
            so = so + lt.n_moe * (sent * rr * lt.outside * per_token)
        else:
            su = su + lt.n_moe * sent * rr * 1.0 * per_token
            so = so + lt.n_moe * (sent * lt.remote_nodes * per_token)
    hop = s.t_group / width * d * ACT_BYTES if lt.pp > 1 else 0.0
    if lt.pp * width <= lt.domain:
        su, so = su + hop, so + 0.0
    else:
        su, so = su + 0.0, so + hop
    return max(su / lt.su_bw, so / lt.so_bw)


class AttentionTerms:
    """A stage's attention roofline (`_Kernels`' first term) as a function of context,
    for one shape whose context-free quantities are frozen."""

    __slots__ = ("_arrays", "a_ctx", "act_bytes", "half", "hbm_bw", "kv_seq", "lin_flops",
                 "monotone", "n_full", "n_slide", "peak_attn", "proj_s", "q_tok", "state", "tp",
                 "w_bytes", "window")

    def __init__(self, lt: LayoutTerms, s: Shape):
        self.tp = tp = lt.tp
        t_rank = s.t_rank
        n_full, n_slide, n_lin = lt.n_full, lt.n_slide, lt.n_lin
        self.q_tok = q_tok = s.q_tok
        self.half = (q_tok + 1.0) / 2.0
        self.a_ctx = t_rank * (lt.ctx_flops_decode if s.decode else lt.ctx_flops_prefill)
        self.n_full, self.n_slide, self.window = n_full, n_slide, lt.window
        self.lin_flops = t_rank * n_lin * lt.linear_flops / tp
        self.proj_s = 2.0 * t_rank * lt.attn_w / tp / lt.peak_dense
        self.kv_seq = s.n_seq * lt.kv_layer
        self.state = 2.0 * s.n_seq * n_lin * lt.state_layer / tp
        self.w_bytes = lt.attn_bytes
        self.act_bytes = (t_rank * lt.d * ACT_BYTES * lt.eff.activation_passes_per_layer
                          * lt.n_layers / tp)
        self.peak_attn, self.hbm_bw = lt.peak_attn, lt.hbm_bw
        # Every operation of `compute_s` and `memory_s` is then an addition, a product by a
        # factor >= 0 or a division by a divisor > 0, each non-decreasing in its operand
        # under IEEE-754 rounding: both sides are non-decreasing in context.
        self.monotone = (self.a_ctx >= 0.0 and n_full >= 0.0 and n_slide >= 0.0
                         and self.kv_seq >= 0.0 and tp > 0.0 and self.peak_attn > 0.0
                         and self.hbm_bw > 0.0)
        self._arrays: tuple | None = None  # `time_array_s`'s operands, made at its first call

    def compute_s(self, context, mn=min):
        """The roofline's compute side at `context`: projections and attention FLOPs."""
        ctx_mean = context + self.half
        flops = self.a_ctx * (self.n_full * ctx_mean + self.n_slide * mn(ctx_mean, self.window)
                              ) / self.tp
        flops = flops + self.lin_flops
        return self.proj_s + flops / self.peak_attn

    def memory_s(self, context, mn=min):
        """The roofline's memory side at `context`: weights, KV and state read, activations."""
        ctx_end = context + self.q_tok
        kv_read = self.kv_seq * (self.n_full * ctx_end + self.n_slide * mn(ctx_end, self.window))
        kv_read = kv_read + self.state
        attn_bytes = self.w_bytes + kv_read
        attn_bytes = attn_bytes + self.act_bytes
        return attn_bytes / self.hbm_bw

    def time_s(self, context, mx=max, mn=min):
        """`_Kernels.t_attn` at `context` (float, or array with np.maximum/np.minimum)."""
        return mx(self.compute_s(context, mn), self.memory_s(context, mn))

    def time_array_s(self, first: float, steps: int) -> np.ndarray:
        """`time_s(first + np.arange(steps), np.maximum, np.minimum)`, the same doubles:
        a long decode run's steps as arrays (`StepTail.tpots_array_s`), each operation
        done in place, the terms that are exactly 0.0 left out (no sliding or linear
        layer, no state), and the divisions by exactly 1.0 (tp). Both sides are
        non-decreasing in context (`monotone`), so when the last step's compute side is
        below the first step's memory side, the memory side is the larger at every step
        and the compute side is not worked out (a decode run at a small batch)."""
        # first + i, i = 0 .. steps - 1: a new array (updated in place below).
        context = (_STEPS[:steps] if steps <= _STEPS.size
                   else np.arange(steps, dtype=np.float64)) + first
        arrays = self._arrays
        if arrays is None:
            arrays = self._arrays = zero_dim(
                self.half, self.a_ctx, self.tp, self.lin_flops, self.peak_attn, self.proj_s,
                self.q_tok, self.kv_seq, self.state, self.w_bytes, self.act_bytes, self.hbm_bw,
                self.n_full, self.n_slide, self.window)
        (half, a_ctx, tp, lin_flops, peak_attn, proj_s, q_tok, kv_seq, state, w_bytes,
         act_bytes, hbm_bw, *layers) = arrays
        flops = None
        last = first + float(steps - 1)
        if not (self.monotone and self.compute_s(last) < self.memory_s(first)):
            # flops = a_ctx * (n_full * ctx_mean + n_slide * min(ctx_mean, window)) / tp
            #         + lin_flops
            flops = _by_layer(context + half, *layers)
            flops *= a_ctx
            if self.tp != 1.0:  # x / 1.0 is x
                flops /= tp
            if self.lin_flops:
                flops += lin_flops
            flops /= peak_attn
            flops += proj_s
        # attn_bytes = w_bytes + (kv_seq * (n_full * ctx_end + n_slide * min(ctx_end,
        #              window)) + state) + act_bytes
        context += q_tok
        kv = _by_layer(context, *layers)
        kv *= kv_seq
        if self.state:
            kv += state
        kv += w_bytes
        kv += act_bytes
        kv /= hbm_bw
        # max(proj_s + flops / peak_attn, attn_bytes / hbm_bw)
        return kv if flops is None else np.maximum(flops, kv, out=flops)


# 0.0, 1.0, ...: a long decode run's step numbers, sliced (`np.arange` costs about as
# much as the addition of the run's first context that follows it).
_STEPS = np.arange(4096, dtype=np.float64)
_STEPS.flags.writeable = False


def zero_dim(*values: float) -> tuple[np.ndarray, ...]:
    """Each value as a 0-d float64 array: the same double, as an array operation's operand.
    numpy (2.x) takes a 0-d array beside an array in about half the time of a Python float
    (~0.7 against ~1.4 us an in-place operation on a few hundred values), which it converts
    at every operation; the arithmetic is the same float64 operation on the same doubles."""
    return tuple(np.array(v, dtype=np.float64) for v in values)


def _by_layer(ctx: np.ndarray, n_full: np.ndarray, n_slide: np.ndarray,
              window: np.ndarray) -> np.ndarray:
    """`n_full * ctx + n_slide * min(ctx, window)` over the attention layers, in place in
    `ctx` (returned), with numpy's operations in that order; without sliding layers the
    second term (+0.0 beside a positive value) is left out. The terms as 0-d arrays
    (`zero_dim`)."""
    if n_slide:
        slide = np.minimum(ctx, window)
        slide *= n_slide
        ctx *= n_full
        ctx += slide
    else:
        ctx *= n_full
    return ctx


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


class Pricing:
    """One worker's layout terms, for its own model and for its MTP module (one
    colocated layer, pp=1: `costmodel.draft`), and its mean tokens a decode step yields."""

    def __init__(self, m: ModelSpec, table: HardwareTable, cfg, eff: Efficiency):
        self.eff = eff
        self.main = LayoutTerms(m, table, cfg, eff)
        self.accepted = _f(expected_tokens_per_step(cfg.mtp, eff.mtp_acceptance))
        self.block = None
        if self.main.mtp > 0:
            block = mtp_module(m)
            self.block = LayoutTerms(block, table, replace(
                cfg, phase=np.full_like(cfg.phase, int(Phase.DECODE)), pp=np.ones_like(cfg.pp)),
                eff)

    def main_pass(self, decode: bool, n_seq: float, new_tokens: float) -> PassTail:
        lt = self.main
        s = Shape(lt, decode, n_seq, new_tokens, lt.mtp)
        return PassTail(AttentionTerms(lt, s), kernel_terms(lt, s), network_s(lt, s),
                        lt.latency_s, self.eff)

    def draft_pass(self, n_seq: float, q_tok: float) -> PassTail:
        """`costmodel.draft._one_pass`: `q_tok` tokens per sequence through the module."""
        lt = self.block
        s = Shape(lt, True, n_seq, 0.0, q_tok - 1.0)
        t_dense, t_always, t_experts, _ = kernel_terms(lt, s)
        tp, wb, hbm_bw = lt.tp, lt.wb_dense, lt.hbm_bw
        head_flops = 2.0 * s.n_seq * lt.head_w / tp
        t_head = max(head_flops / lt.peak_dense, lt.head_read_s)
        proj_w = 2.0 * lt.d * lt.d
        proj_flops = 2.0 * s.t_rank * proj_w / tp
        t_proj = max(proj_flops / lt.peak_dense, proj_w / tp * wb / hbm_bw)
        return PassTail(AttentionTerms(lt, s), (t_dense, t_always, t_experts, t_head, t_proj),
                        network_s(lt, s), lt.latency_s, self.eff)
