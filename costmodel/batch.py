"""One step of a heterogeneous batch, priced request by request where it matters.

`phase_cost` prices a batch of identical sequences. A real step mixes them: a
long prompt's chunk beside short ones, a cold prefill beside a midfill with a
long cached prefix, decodes beside prefill chunks (chunked prefill, Sarathi-
Serve: https://arxiv.org/abs/2403.02310). Attention is quadratic-ish in a
sequence's chunk and linear in its context, so pricing such a batch at its mean
under-prices a skewed one. Here the attention and KV terms are summed over the
requests; the terms that only count tokens (dense FFN, router and shared
experts, routed experts with expert-sorted batching, LM head, network, fixed
latencies) are the colocated cost core's at the batch's total tokens.

With data-parallel attention (`max(tp, ep) / tp` ranks), a request is placed whole
on one rank: the engine's data-parallel controller sends each request to the next
rank round robin (SGLang's default `--load-balance-method round_robin`,
`round_robin_scheduler` in python/sglang/srt/managers/data_parallel_controller.py,
https://github.com/sgl-project/sglang), so request i of a step is on rank
i mod ranks (`placed`). Every rank waits for the others at the expert all-to-all, so
the step lasts as long as its slowest rank: its attention, dense FFN, shared experts
and LM head over its own requests, the routed experts and the all-to-all over every
rank's tokens. The slowest rank is the one with the most attention work or the most
tokens, whichever is the longer priced in full. One prompt fills on one rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.configs import Configs, Phase
from costmodel.draft import draft_passes
from costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from costmodel.hardware import HardwareTable
from costmodel.kernels import Kernels, Shape
from costmodel.model_spec import ModelSpec
from costmodel.mtp import expected_tokens_per_step
from costmodel.precision import Precision
from costmodel.terms import ACT_BYTES, fixed_latency, network, overlapped, request_terms


@dataclass(frozen=True)
class BatchStepCost:
    step_time_s: float  # one micro-batch through all stages
    stage_time_s: float  # one stage: the pipeline takes a new micro-batch this often
    attention_s: float  # per stage: the requests' attention and KV traffic (roofline)
    tokens: float  # query tokens of the step over the whole instance
    sequences: int


def request_attention_terms(m: ModelSpec, v, q_tok, cached, ctx_flops, mn=np.minimum):
    """Per request (floats, or arrays of requests): the FLOPs of its scores and values
    over its context (`ctx_flops` a (query, context) token pair) and the KV bytes it reads
    after the step, each over the stage's layers (sliding ones up to their window). `v`:
    the layout's quantities, a `Shape` of one configuration or the workers' float copy
    of it (`workers.fast_pricing.LayoutTerms`)."""
    return request_terms(q_tok, cached, ctx_flops, v.n_full, v.n_slide, v.window, v.kv_layer,
                         m.n_sliding_layers > 0, mn)


def _first(x) -> float:
    return x if type(x) is float else float(np.ravel(x)[0])


def batch_attention_from_sums(m: ModelSpec, v, eff: Efficiency, q_sum, ctx_sum, kv_sum,
                              requests: int, ranks: float) -> float:
    """Per stage on one attention rank: the attention group's roofline time from the
    requests' sums (query tokens, `request_attention_terms`' FLOPs and KV bytes, each
    summed in numpy's pairwise order)."""
    tp = _first(v.tp)
    attn_w = (v.n_full + v.n_slide) * m.attn_params + v.n_lin * m.linear_params
    tokens = q_sum / ranks
    ctx = ctx_sum / ranks / tp
    ctx += tokens * v.n_lin * m.linear_flops_per_token / tp
    proj = 2.0 * tokens * attn_w / tp
    kv_read = kv_sum / ranks
    kv_read += 2.0 * (requests / ranks) * v.n_lin * v.state_layer / tp
    attn_bytes = attn_w / tp * v.wb_dense + kv_read
    attn_bytes += tokens * m.hidden_size * ACT_BYTES * eff.activation_passes_per_layer * (
        v.n_layers / tp)
    return _first(max(_first(proj / v.peak_dense + ctx / v.peak_attn),
                      _first(attn_bytes / v.hbm_bw)))


def batch_attention_s(m: ModelSpec, v, eff: Efficiency, q_tok: np.ndarray,
                      cached: np.ndarray, decoding: np.ndarray, ranks: float) -> float:
    """Per stage on one attention rank: `Kernels`' attention term, summed per request
    (each request's own chunk and context) instead of at the batch's mean."""
    ctx_flops = np.where(decoding, m.attn_flops_per_ctx_token_decode,
                         m.attn_flops_per_ctx_token_prefill)
    ctx_terms, kv_terms = request_attention_terms(m, v, q_tok, cached, ctx_flops)
    return batch_attention_from_sums(m, v, eff, np.add.reduce(q_tok), np.add.reduce(ctx_terms),
                                     np.add.reduce(kv_terms), q_tok.size, ranks)


def placed(n: int, ranks: int) -> list[np.ndarray]:
    """The indices of a step's `n` requests on each attention rank that holds any:
    request i on rank i mod `ranks` (round robin, as SGLang's controller places them)."""
    return [np.arange(r, n, ranks) for r in range(min(ranks, n))]


def batch_token_terms(model: ModelSpec, hardware: HardwareTable, all_decode: bool, batch: float,
                      q_mean: float, context_mean: float, *, pp: int, tp: int, ep: int,
                      precision: Precision, kv_precision: Precision, mtp: int,
                      hardware_index: int = 0, attention_precision: Precision | None = None,
                      eff: Efficiency = DEFAULT_EFFICIENCY, group_tokens: float | None = None):
    """The token-count terms of a batch step: the shape and kernels of a uniform batch of
    `batch` sequences per rank at the batch's mean query tokens and context, its network
    time and fixed latencies (those do not depend on the context). `group_tokens`: the
    query tokens over every rank, when the ranks do not hold `batch` each."""
    extra = {} if attention_precision is None else {
        "attention_precision": int(attention_precision)}
    cfg = Configs.make(phase=int(Phase.DECODE if all_decode else Phase.PREFILL),
                       batch=batch, new_tokens=q_mean, context=context_mean,
                       pp=pp, tp=tp, ep=ep, precision=int(precision),
                       hardware=hardware_index, kv_precision=int(kv_precision), mtp=mtp, **extra)
    v = Shape(model, hardware, cfg, eff)
    if group_tokens is not None:
        v.t_group = np.full_like(v.t_rank, group_tokens)
    k = Kernels(model, v, eff)
    _, _, network_s = network(model, v, v)
    return v, k, network_s, fixed_latency(model, v, eff)


def batch_step_cost(model: ModelSpec, hardware: HardwareTable, new_tokens, cached_tokens,
                    decoding=False, *, pp: int = 1, tp: int = 1, ep: int = 1,
                    precision: Precision = Precision.FP8,
                    kv_precision: Precision = Precision.BF16, mtp: int = 0,
                    hardware_index: int = 0, attention_precision: Precision | None = None,
                    eff: Efficiency = DEFAULT_EFFICIENCY) -> BatchStepCost:
    """One step of a batch: request i computes `new_tokens[i]` query tokens over
    `cached_tokens[i]` tokens it already holds (decoding requests: one token plus `mtp`
    drafts; their `new_tokens` is ignored). `decoding` is per request or one flag.
    `attention_precision`: that of the non-expert weights (None: the cost core's rule).

    A step with any fill chunk uses the fill kernels for the all-to-all (throughput
    mode); a pure decode step the low-latency ones, as `phase_cost` does. With `mtp`,
    the MTP module's draft passes for the decoding requests follow the main pass
    (`costmodel.draft`), at their mean context."""
    cached = np.asarray(cached_tokens, dtype=np.float64).ravel()
    n = cached.size
    if n == 0:
        raise ValueError("a batch step needs at least one request")
    new = np.broadcast_to(np.asarray(new_tokens, dtype=np.float64), (n,))
    decoding = np.broadcast_to(np.asarray(decoding, dtype=bool), (n,))
    q_tok = np.where(decoding, 1.0 + mtp, new)
    ranks = max(tp, ep) // tp
    all_decode = bool(decoding.all())
    extra = {} if attention_precision is None else {
        "attention_precision": int(attention_precision)}
    lay = dict(pp=pp, tp=tp, ep=ep, precision=precision, kv_precision=kv_precision, mtp=mtp,
               hardware_index=hardware_index, eff=eff, **extra)
    rows = placed(n, ranks)
    group = None if ranks == 1 else float(q_tok.sum())
    v = None
    attn = []
    for idx in rows:
        if v is None:  # the layout's constants: any batch's shape holds them
            v = batch_token_terms(model, hardware, all_decode, idx.size, 1.0, 0.0, **lay)[0]
        attn.append(batch_attention_s(model, v, eff, q_tok[idx], cached[idx], decoding[idx],
                                      1.0))
    tokens = [float(q_tok[idx].sum()) for idx in rows]
    # The slowest rank: the most attention work, or the most tokens (dense FFN, shared
    # experts and LM head grow with them); each candidate priced in full.
    candidates = sorted({int(np.argmax(attn)), int(np.argmax(tokens))})
    stage, t_attn = -1.0, 0.0
    for r in candidates:
        idx = rows[r]
        _, k, network_s, latency_s = batch_token_terms(
            model, hardware, all_decode, idx.size, q_tok[idx].mean(), cached[idx].mean(),
            group_tokens=group, **lay)
        t_cm = attn[r] + k.t_dense + k.t_always + k.t_experts + k.t_head
        rank_stage = float(np.ravel(overlapped(t_cm, network_s, latency_s, eff, np.minimum))[0])
        if rank_stage > stage:
            stage, t_attn = rank_stage, attn[r]
    draft_s = 0.0
    if mtp and decoding.any():
        # The decoding requests' drafts, as a uniform decode batch of the rank with the
        # most of them prices them, at the decoding requests' mean context.
        most = max(int(decoding[idx].sum()) for idx in rows)
        dcfg = Configs.make(phase=int(Phase.DECODE), batch=most,
                            new_tokens=1, context=cached[decoding].mean(), pp=pp, tp=tp,
                            ep=ep, precision=int(precision), hardware=hardware_index,
                            kv_precision=int(kv_precision), mtp=mtp,
                            group_sequences=None if ranks == 1 else int(decoding.sum()),
                            **extra)
        accepted = expected_tokens_per_step(dcfg.mtp, eff.mtp_acceptance)
        draft_s = float(draft_passes(model, hardware, dcfg, eff, accepted).time_s[0])
    return BatchStepCost(step_time_s=pp * stage + draft_s + eff.step_overhead_s,
                         stage_time_s=stage,
                         attention_s=t_attn, tokens=float(q_tok.sum()), sequences=n)
