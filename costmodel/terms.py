"""The roofline's terms, one function per kernel group, on floats or numpy arrays.

Each function takes the layout's quantities (`lay`: bandwidths, peaks, layers per
stage, bytes per element, parallelism) and the step's batch quantities (`b`: tokens
per attention rank `t_rank`, per stage `t_group`, sequences `n_seq`, query tokens
`q_tok`, `decode`) as attributes, and an `Ops` namespace for what is not plain
arithmetic (max, min, a choice, a power). The vectorised core (`costmodel/kernels.py`,
`costmodel/draft.py`) passes its `Shape` of configuration arrays as both and
`NUMPY_OPS`; the workers' pricing (`workers/fast_pricing.py`) passes one configuration
as Python floats and `FLOAT_OPS`. The operations are the same in the same order, and
IEEE-754 addition, multiplication, division, min and max give the same double
whether numpy or Python performs them: both paths give the same doubles
(`tests/property/test_pricing_fast_path.py`).

A kernel group's time is the longer of its compute and its memory time (roofline);
`overlapped` adds a pass's groups, network and fixed latencies under the overlap rule
(`Efficiency.overlap`).

The terms at a context (`attention_ctx_flops`, `attention_bytes`, `attention_s` and its
two sides, `overlap_stage`) run at every step of a worker's decode run. Compiled
(`costmodel/terms.pxd`), each is built twice from this one source: on C doubles for a
`FloatWork` and a float context, and on Python objects for arrays. Their `min` and `max`
are then the builtins called by name when `mn`/`mx` are the builtins (the compiled
build makes those a comparison of two doubles that picks the operand the builtin picks),
and `mn(...)`/`mx(...)` otherwise (`np.minimum`, `np.maximum` over arrays).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from costmodel.efficiency import Efficiency, OverlapMode
from costmodel.model_spec import AttentionKind, ModelSpec

ACT_BYTES = 2.0  # activations travel and rest in BF16


class Ops(NamedTuple):
    """The operations that differ between floats and arrays."""

    maximum: Callable
    minimum: Callable
    where: Callable  # where(condition, if_true, if_false)
    power: Callable


def _choose(condition, if_true, if_false):
    return if_true if condition else if_false


NUMPY_OPS = Ops(np.maximum, np.minimum, np.where, operator.pow)
FLOAT_OPS = Ops(max, min, _choose, operator.pow)


class Roof(NamedTuple):
    """One kernel group per stage: its FLOPs, HBM bytes read and roofline time."""

    flops: object
    hbm_bytes: object
    time_s: object


def distinct(n_slots, picks_per_draw, draws, ops: Ops = NUMPY_OPS):
    """Expected distinct slots hit when `draws` independent draws each pick
    `picks_per_draw` of `n_slots` uniformly."""
    miss = ops.minimum(ops.maximum(1.0 - picks_per_draw / n_slots, 0.0), 1.0)
    return n_slots * (1.0 - ops.power(miss, draws))


def gemm(tokens, weights, tp, peak_flops_per_s, weight_bytes_per_elem, hbm_bw,
         ops: Ops = NUMPY_OPS) -> Roof:
    """A weight GEMM over `tokens` (dense FFN, router and shared experts, LM head, the
    MTP projection): 2 FLOPs a weight a token, the weights read once, split over TP."""
    flops = 2.0 * tokens * weights / tp
    read = weights / tp * weight_bytes_per_elem
    return Roof(flops, read, ops.maximum(flops / peak_flops_per_s, read / hbm_bw))


def routed_experts(m: ModelSpec, lay, b, eff: Efficiency, ops: Ops = NUMPY_OPS) -> Roof:
    """The routed experts of a stage's MoE layers, on one EP rank: sorted by expert, each
    touched expert's weights load once per step; FLOPs scaled by the EP imbalance."""
    mo = m.moe
    touched = (distinct(mo.routed_experts, mo.top_k, b.t_group, ops)
               * lay.experts_per_rank / mo.routed_experts)
    exp_bytes = lay.n_moe * touched * m.expert_params / lay.split * lay.wb_exp
    exp_flops = 2.0 * lay.n_moe * b.t_group * mo.top_k / lay.ep * m.expert_params / lay.split
    exp_flops = exp_flops * eff.ep_imbalance
    return Roof(exp_flops, exp_bytes,
                ops.maximum(exp_flops / lay.peak_exp, exp_bytes / lay.hbm_bw))


class AttentionWork(NamedTuple):
    """A stage's attention group with its context left free: what
    `attention_compute_s` and `attention_memory_s` need besides the context."""

    q_tok: object  # query tokens per sequence
    half: object  # (q_tok + 1) / 2: causal, a query sees half its own chunk on average
    a_ctx: object  # t_rank x FLOPs per (query, context) token pair
    n_full: object
    n_slide: object
    window: object
    tp: object
    lin_flops: object  # linear-attention layers' FLOPs (no context term)
    proj_flops: object  # QKV and output projections
    kv_seq: object  # KV bytes per context token per full layer, all sequences
    state: object  # recurrent state read and written
    w_bytes: object  # attention weights
    act_bytes: object  # activations in and out of each layer
    peak_dense: object
    peak_attn: object
    hbm_bw: object
    sliding: bool  # the model has sliding-window layers (else their terms are +0.0)
    linear: bool  # the model has linear-attention layers (else their terms are +0.0)


def attention_work(m: ModelSpec, lay, b, eff: Efficiency, ops: Ops = NUMPY_OPS) -> AttentionWork:
    d, tp, t_rank = float(m.hidden_size), lay.tp, b.t_rank
    attn_w = (lay.n_full + lay.n_slide) * m.attn_params + lay.n_lin * m.linear_params
    ctx_flops = ops.where(b.decode, m.attn_flops_per_ctx_token_decode,
                          m.attn_flops_per_ctx_token_prefill)
    return AttentionWork(
        q_tok=b.q_tok, half=(b.q_tok + 1.0) / 2.0, a_ctx=t_rank * ctx_flops,
        n_full=lay.n_full, n_slide=lay.n_slide, window=lay.window, tp=tp,
        lin_flops=t_rank * lay.n_lin * m.linear_flops_per_token / tp,
        proj_flops=2.0 * t_rank * attn_w / tp,
        kv_seq=b.n_seq * lay.kv_layer,
        state=2.0 * b.n_seq * lay.n_lin * lay.state_layer / tp,
        w_bytes=attn_w / tp * lay.wb_dense,
        act_bytes=t_rank * d * ACT_BYTES * eff.activation_passes_per_layer * lay.n_layers / tp,
        peak_dense=lay.peak_dense, peak_attn=lay.peak_attn, hbm_bw=lay.hbm_bw,
        sliding=m.n_sliding_layers > 0, linear=m.n_linear_layers > 0)


class FloatWork:
    """An `AttentionWork` of one configuration's Python floats, as a class whose fields
    the compiled build holds as C doubles (`costmodel/terms.pxd`): what a worker's
    pricing passes to the terms at a context at every step of a run."""

    __slots__ = ("a_ctx", "act_bytes", "half", "hbm_bw", "kv_seq", "lin_flops", "linear",
                 "n_full", "n_slide", "peak_attn", "peak_dense", "proj_flops", "q_tok",
                 "sliding", "state", "tp", "w_bytes", "window")

    def __init__(self, work: AttentionWork):
        for name in AttentionWork._fields:
            setattr(self, name, getattr(work, name))


def attention_ctx_flops(w, context, mn=min):
    """The attention group's FLOPs beside its projections at `context`: scores and values
    over the context (sliding layers up to their window), and the linear layers'. A
    model without sliding or linear layers leaves their terms out: each is +0.0 beside
    a value >= 0, which would leave it as it is."""
    ctx_mean = context + w.half
    by_layer = w.n_full * ctx_mean
    if w.sliding:
        if mn is min:  # noqa: SIM108 (a conditional expression would box the doubles)
            in_window = min(ctx_mean, w.window)
        else:
            in_window = mn(ctx_mean, w.window)
        by_layer = by_layer + w.n_slide * in_window
    flops = w.a_ctx * by_layer / w.tp
    return flops + w.lin_flops if w.linear else flops


def attention_bytes(w, context, mn=min):
    """The attention group's HBM bytes at `context`: the weights, the KV read after the
    step (sliding layers up to their window), the recurrent state in and out, and the
    activations."""
    ctx_end = context + w.q_tok
    by_layer = w.n_full * ctx_end
    if w.sliding:
        if mn is min:  # noqa: SIM108 (a conditional expression would box the doubles)
            in_window = min(ctx_end, w.window)
        else:
            in_window = mn(ctx_end, w.window)
        by_layer = by_layer + w.n_slide * in_window
    kv_read = w.kv_seq * by_layer
    if w.linear:
        kv_read = kv_read + w.state
    attn_bytes = w.w_bytes + kv_read
    return attn_bytes + w.act_bytes


def attention_s(w, context, mx=max, mn=min):
    """The attention group's roofline time at `context` (a float, or an array with
    np.maximum and np.minimum)."""
    compute = w.proj_flops / w.peak_dense + attention_ctx_flops(w, context, mn) / w.peak_attn
    memory = attention_bytes(w, context, mn) / w.hbm_bw
    if mx is max:
        return max(compute, memory)
    return mx(compute, memory)


def attention_compute_s(w, context, mn=min):
    """`attention_s`' compute side at `context`."""
    return w.proj_flops / w.peak_dense + attention_ctx_flops(w, context, mn) / w.peak_attn


def attention_memory_s(w, context, mn=min):
    """`attention_s`' memory side at `context`."""
    return attention_bytes(w, context, mn) / w.hbm_bw


def request_terms(q_tok, cached, ctx_flops, n_full, n_slide, window, kv_layer, sliding,
                  mn=min):
    """Per request of a batch step (floats, or arrays of requests): the FLOPs of its
    scores and values over its context (`ctx_flops` a (query, context) token pair) and
    the KV bytes it reads after the step, each over the stage's layers (sliding ones up
    to their window; `sliding`: the model has such layers, else their +0.0 terms are
    left out). Summed over a rank's requests by `costmodel.batch`."""
    # Causal attention: a query sees the cache plus, on average, half its own chunk.
    ctx_mean = cached + (q_tok + 1.0) / 2.0
    ctx_end = cached + q_tok
    if sliding:
        if mn is min:
            mean_in, end_in = min(ctx_mean, window), min(ctx_end, window)
        else:
            mean_in, end_in = mn(ctx_mean, window), mn(ctx_end, window)
        ctx_mean = n_full * ctx_mean + n_slide * mean_in
        ctx_end = n_full * ctx_end + n_slide * end_in
    else:
        ctx_mean = n_full * ctx_mean
        ctx_end = n_full * ctx_end
    return q_tok * ctx_flops * ctx_mean, kv_layer * ctx_end


def a2a_reach(m: ModelSpec, lay, ops: Ops = NUMPY_OPS):
    """Of a token's top-k experts: the distinct remote EP ranks and remote scale-up
    domains they live on, and the share of EP ranks beyond the sender's domain."""
    ep, width, top_k = lay.ep, lay.width, m.moe.top_k
    remote_ranks = ops.where(ep > 1, distinct(ep, 1.0, top_k, ops) * (ep - 1) / ep, 0.0)
    nodes = ops.maximum(1.0, width / lay.domain)
    remote_nodes = ops.where(nodes > 1,
                             distinct(nodes, 1.0, top_k, ops) * (nodes - 1) / nodes, 0.0)
    outside = ops.minimum(ops.maximum(1.0 - lay.domain / width, 0.0), 1.0)
    return remote_ranks, remote_nodes, outside


def network(m: ModelSpec, lay, b, ops: Ops = NUMPY_OPS):
    """(scale-up bytes, scale-out bytes, time) each GPU sends per stage: the TP
    all-reduces, the expert all-to-all and the pipeline hop."""
    d, tp, width, where = float(m.hidden_size), lay.tp, lay.width, ops.where
    su_bytes = where(tp > 1, 2.0 * (tp - 1) / tp * b.t_rank * d * ACT_BYTES, 0.0)
    su_bytes = su_bytes * 2.0 * lay.n_layers  # after attention and after the FFN
    so_bytes = 0.0 * su_bytes
    if m.moe is not None:
        per_token = d * (lay.disp + ACT_BYTES)  # FP8 dispatch (or BF16), BF16 combine
        sent = b.t_group / width  # tokens each GPU scatters (sequence-parallel within TP)
        # Fills use throughput all-to-all kernels: across domains one copy per remote node,
        # forwarded over NVLink (DeepEP normal mode). Decode uses low-latency kernels that
        # send straight to each remote rank over RDMA: no per-node deduplication.
        so_fill = sent * lay.remote_nodes * per_token
        so_decode = sent * lay.remote_ranks * lay.outside * per_token
        su_bytes = su_bytes + lay.n_moe * sent * lay.remote_ranks * where(
            b.decode, 1.0 - lay.outside, 1.0) * per_token
        so_bytes = so_bytes + lay.n_moe * where(b.decode, so_decode, so_fill)
    in_domain = lay.pp * width <= lay.domain
    hop = where(lay.pp > 1, b.t_group / width * d * ACT_BYTES, 0.0)
    su_bytes = su_bytes + where(in_domain, hop, 0.0)
    so_bytes = so_bytes + where(in_domain, 0.0, hop)
    return su_bytes, so_bytes, ops.maximum(su_bytes / lay.su_bw, so_bytes / lay.so_bw)


def attention_efficiency(m: ModelSpec, eff: Efficiency) -> float:
    """The compute factor of the attention's scores and values: one per attention kind
    (MLA, GQA) for every phase (`costmodel/calibration.py` fits each)."""
    return eff.compute_attn_mla if m.attention is AttentionKind.MLA else eff.compute_attn_gqa


def kernels_per_stage(m: ModelSpec, lay, eff: Efficiency):
    """Kernels a pass through a stage launches: the attention's by kind on every layer,
    the dense FFN's and the MoE FFN's on theirs."""
    attn_kernels = (eff.kernels_attn_mla if m.attention is AttentionKind.MLA
                    else eff.kernels_attn_gqa)
    return (lay.n_layers * attn_kernels + lay.n_dense * eff.kernels_ffn_dense
            + lay.n_moe * eff.kernels_ffn_moe)


def fixed_latency(m: ModelSpec, lay, eff: Efficiency, ops: Ops = NUMPY_OPS):
    """Fixed latencies per stage: launches, collectives, all-to-all floors, the PP hop."""
    where = ops.where
    latency_s = kernels_per_stage(m, lay, eff) * eff.kernel_launch_s
    latency_s = latency_s + where(lay.tp > 1, 2.0 * lay.n_layers * eff.tp_collective_s, 0.0)
    if m.moe is not None:
        a2a = where(lay.width > lay.domain, eff.a2a_scale_out_s, eff.a2a_scale_up_s)
        latency_s = latency_s + where(lay.ep > 1, 2.0 * lay.n_moe * a2a, 0.0)
    return latency_s + where(lay.pp > 1, eff.pp_hop_s, 0.0)


def overlapped(t_cm, network_s, latency_s, eff: Efficiency, mn=min):
    """A pass through a stage: its kernel groups' time `t_cm`, the network and the fixed
    latencies, less the overlapped share of the shorter of compute and network."""
    return overlap_stage(t_cm, network_s, latency_s, eff.overlap == OverlapMode.OVERLAP,
                         eff.overlap_fraction, mn)


def overlap_stage(t_cm, network_s, latency_s, overlap: bool, fraction: float, mn=min):
    """`overlapped` with the overlap rule read from `Efficiency` (`overlap`: two-batch
    overlap; `fraction`: its hidden share)."""
    stage_s = t_cm + network_s + latency_s
    if overlap:
        if mn is min:  # noqa: SIM108 (a conditional expression would box the doubles)
            hidden = min(t_cm, network_s)
        else:
            hidden = mn(t_cm, network_s)
        stage_s = stage_s - fraction * hidden
    return stage_s
