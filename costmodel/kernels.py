"""Per-stage terms of a step: the configuration turned into shapes, each kernel
group's roofline time, the bytes sent over scale-up and scale-out, and the fixed
latencies. `costmodel/phase.py` adds them into a step; `costmodel/draft.py`,
`costmodel/batch.py` and `costmodel/disagg.py` reuse them for the MTP draft
passes, heterogeneous batches and attention-FFN split instances.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING

import numpy as np

from costmodel.efficiency import Efficiency
from costmodel.hardware import HardwareTable
from costmodel.memory import dense_weight_bytes, expert_weight_bytes, stage_fraction
from costmodel.model import AttentionKind, ModelSpec
from costmodel.precision import BYTES_PER_ELEMENT, Precision

if TYPE_CHECKING:
    from costmodel.phase import Configs

ACT_BYTES = 2.0  # activations travel and rest in BF16


class Phase(IntEnum):
    PREFILL = 0  # new tokens, (almost) nothing cached
    MIDFILL = 1  # a long cached prefix plus a short new suffix
    DECODE = 2  # one token per sequence per step (more with MTP)


def _distinct(n_slots: float, picks_per_draw, draws):
    """Expected distinct slots hit when `draws` independent draws each pick
    `picks_per_draw` of `n_slots` uniformly."""
    miss = np.clip(1.0 - np.asarray(picks_per_draw) / n_slots, 0.0, 1.0)
    return n_slots * (1.0 - miss ** draws)


class _Shape:
    """The configuration arrays turned into per-stage quantities every term uses."""

    def __init__(self, m: ModelSpec, hardware: HardwareTable, cfg: Configs, eff: Efficiency):
        hw = cfg.hardware
        cols = hardware.columns()
        self.hbm_bw = cols["hbm_bytes_per_s"][hw] * eff.hbm
        self.su_bw = cols["scale_up_bytes_per_s"][hw] * eff.scale_up
        self.so_bw = cols["scale_out_bytes_per_s"][hw] * eff.scale_out
        self.domain = cols["scale_up_domain_gpus"][hw]
        self.hw = hw
        self.decode = cfg.phase == Phase.DECODE
        self.pp, self.tp, self.ep = pp, tp, ep = cfg.pp, cfg.tp, cfg.ep
        self.width = np.maximum(tp, ep)  # GPUs per stage
        self.attn_ranks = self.width / tp
        self.n_seq = cfg.batch
        # Query tokens per sequence this step.
        self.q_tok = np.where(self.decode, 1.0 + cfg.mtp, cfg.new_tokens)
        self.t_rank = self.n_seq * self.q_tok  # tokens per attention rank per micro-batch
        # Tokens per stage per micro-batch: every rank's, or the placed sequences'.
        group = cfg.group_sequences
        self.t_group = (self.t_rank * self.attn_ranks if group is None
                        else group * self.q_tok)
        self.ctx_end = cfg.context + self.q_tok  # KV length after the step
        # Causal attention: a query sees the cache plus, on average, half its own chunk.
        self.ctx_mean = cfg.context + (self.q_tok + 1.0) / 2.0
        f = stage_fraction(m, pp)
        self.n_full, self.n_slide = f * m.n_full_layers, f * m.n_sliding_layers
        self.n_lin, self.n_dense = f * m.n_linear_layers, f * m.n_dense_layers
        self.n_moe = f * m.n_moe_layers
        self.n_layers = self.n_full + self.n_slide + self.n_lin
        self.wprec = wprec = cfg.precision
        self.aprec = aprec = cfg.attention_precision
        self.wb_dense = dense_weight_bytes(aprec)
        self.wb_exp = expert_weight_bytes(m, wprec)
        peak = hardware.flops_column()
        # Per operation class (costmodel/calibration.py fits each against the measured
        # tables): dense GEMMs, grouped expert GEMMs, attention by kind and phase.
        self.peak_dense = peak[hw, aprec] * eff.compute
        self.peak_exp = peak[hw, wprec] * eff.compute_moe
        # One attention factor per kind for every phase: a mixed step prices its fills'
        # and decodes' attention together (costmodel/batch.py).
        attn_eff = (eff.compute_attn_mla if m.attention is AttentionKind.MLA
                    else eff.compute_attn_gqa)
        self.peak_attn = peak[hw, Precision.BF16] * attn_eff
        kvb = np.array([BYTES_PER_ELEMENT[p] for p in Precision])[cfg.kv_precision]
        kv_split = 1.0 if m.attention == 0 else np.minimum(tp, m.gqa.kv_heads)
        self.kv_layer = m.kv_elems_per_token_layer * kvb / kv_split
        self.state_layer = (m.state_bytes_per_sequence(2.0) / max(m.n_linear_layers, 1)
                            if m.n_linear_layers else 0.0)
        self.window = max(m.sliding_window, 1)


class _Kernels:
    """Per stage: each kernel group's roofline time, and the compute and HBM totals."""

    def __init__(self, m: ModelSpec, v: _Shape, eff: Efficiency):
        d, tp, t_rank = float(m.hidden_size), v.tp, v.t_rank
        attn_proj_flops, attn_ctx_flops, attn_bytes, t_attn = _attention(m, v, eff)
        # Dense FFN layers.
        dense_w = v.n_dense * m.dense_ffn_params
        dense_flops = 2.0 * t_rank * dense_w / tp
        t_dense = np.maximum(dense_flops / v.peak_dense, dense_w / tp * v.wb_dense / v.hbm_bw)
        # MoE layers: router and shared experts on every token, routed experts by EP rank.
        if m.moe is not None:
            mo = m.moe
            always_w = v.n_moe * m.moe_always_params
            always_flops = 2.0 * t_rank * always_w / tp
            t_always = np.maximum(always_flops / v.peak_dense,
                                  always_w / tp * v.wb_dense / v.hbm_bw)
            split = np.maximum(1.0, tp / v.ep)  # experts tensor-split when tp > ep
            experts_per_rank = np.ceil(mo.routed_experts / v.ep)
            # Sorted by expert, each touched expert's weights load once per step.
            touched = (_distinct(mo.routed_experts, mo.top_k, v.t_group)
                       * experts_per_rank / mo.routed_experts)
            exp_bytes = v.n_moe * touched * m.expert_params / split * v.wb_exp
            exp_flops = 2.0 * v.n_moe * v.t_group * mo.top_k / v.ep * m.expert_params / split
            exp_flops *= eff.ep_imbalance
            t_experts = np.maximum(exp_flops / v.peak_exp, exp_bytes / v.hbm_bw)
            self.exp_act = v.t_group * mo.top_k / v.ep * eff.ep_imbalance * (
                2 * mo.expert_intermediate + (mo.latent_size or d)) * ACT_BYTES
        else:
            always_w = always_flops = exp_flops = exp_bytes = self.exp_act = 0.0
            t_always = t_experts = 0.0
        # LM head (last stage): logits for every decode token, the last token of a fill.
        head_tok = np.where(v.decode, t_rank, v.n_seq)
        head_w = m.vocab_size * d
        head_flops = 2.0 * head_tok * head_w / tp
        t_head = np.maximum(head_flops / v.peak_dense, head_w / tp * v.wb_dense / v.hbm_bw)

        self.compute_s = (attn_proj_flops / v.peak_dense + attn_ctx_flops / v.peak_attn
                          + dense_flops / v.peak_dense + always_flops / v.peak_dense
                          + exp_flops / v.peak_exp + head_flops / v.peak_dense)
        hbm_read = attn_bytes + dense_w / tp * v.wb_dense + exp_bytes + head_w / tp * v.wb_dense
        if m.moe is not None:
            hbm_read = hbm_read + always_w / tp * v.wb_dense
        self.hbm_read = hbm_read
        self.memory_s = hbm_read / v.hbm_bw
        # Kept per group so a split instance (costmodel/disagg.py) can price each side.
        self.t_attn, self.t_dense, self.t_always = t_attn, t_dense, t_always
        self.t_experts, self.t_head, self.exp_bytes = t_experts, t_head, exp_bytes
        self.head_flops = head_flops
        self.t_cm = t_attn + t_dense + t_always + t_experts + t_head
        self.flops = (attn_proj_flops + attn_ctx_flops + dense_flops + always_flops + exp_flops
                      + head_flops)


def _attention(m: ModelSpec, v: _Shape, eff: Efficiency):
    """`_Kernels`' attention group: projection FLOPs, FLOPs of scores and values over
    the context, HBM bytes (weights, KV and state traffic, activations) and its
    roofline time."""
    d, tp, t_rank = float(m.hidden_size), v.tp, v.t_rank
    attn_w = (v.n_full + v.n_slide) * m.attn_params + v.n_lin * m.linear_params
    ctx_flops = np.where(v.decode, m.attn_flops_per_ctx_token_decode,
                         m.attn_flops_per_ctx_token_prefill)
    attn_ctx_flops = t_rank * ctx_flops * (
        v.n_full * v.ctx_mean + v.n_slide * np.minimum(v.ctx_mean, v.window)) / tp
    attn_ctx_flops += t_rank * v.n_lin * m.linear_flops_per_token / tp
    attn_proj_flops = 2.0 * t_rank * attn_w / tp
    kv_read = v.n_seq * v.kv_layer * (
        v.n_full * v.ctx_end + v.n_slide * np.minimum(v.ctx_end, v.window))
    kv_read += 2.0 * v.n_seq * v.n_lin * v.state_layer / tp  # recurrent state in and out
    attn_bytes = attn_w / tp * v.wb_dense + kv_read
    attn_bytes += t_rank * d * ACT_BYTES * eff.activation_passes_per_layer * v.n_layers / tp
    t_attn = np.maximum(attn_proj_flops / v.peak_dense + attn_ctx_flops / v.peak_attn,
                        attn_bytes / v.hbm_bw)
    return attn_proj_flops, attn_ctx_flops, attn_bytes, t_attn


def _network(m: ModelSpec, v: _Shape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bytes each GPU sends per stage over scale-up and scale-out, and the time."""
    d, tp, width = float(m.hidden_size), v.tp, v.width
    tp_bytes = np.where(tp > 1, 2.0 * (tp - 1) / tp * v.t_rank * d * ACT_BYTES, 0.0)
    tp_bytes = tp_bytes * 2.0 * (v.n_layers)  # after attention and after the FFN
    su_bytes = tp_bytes
    so_bytes = np.zeros_like(tp_bytes)
    if m.moe is not None:
        disp = np.where(v.wprec >= Precision.FP8, 1.0, 2.0)  # FP8 dispatch, BF16 combine
        per_token = d * (disp + ACT_BYTES)
        sent = v.t_group / width  # tokens each GPU scatters (sequence-parallel within TP)
        remote_ranks, remote_nodes, outside = _a2a_reach(m, v)
        # Fills use throughput all-to-all kernels: across domains one copy per remote node,
        # forwarded over NVLink (DeepEP normal mode). Decode uses low-latency kernels that
        # send straight to each remote rank over RDMA: no per-node deduplication.
        so_fill = sent * remote_nodes * per_token
        so_decode = sent * remote_ranks * outside * per_token
        su_bytes = su_bytes + v.n_moe * sent * remote_ranks * np.where(
            v.decode, 1.0 - outside, 1.0) * per_token
        so_bytes = so_bytes + v.n_moe * np.where(v.decode, so_decode, so_fill)
    in_domain = v.pp * width <= v.domain
    hop = np.where(v.pp > 1, v.t_group / width * d * ACT_BYTES, 0.0)
    su_bytes = su_bytes + np.where(in_domain, hop, 0.0)
    so_bytes = so_bytes + np.where(in_domain, 0.0, hop)
    return su_bytes, so_bytes, np.maximum(su_bytes / v.su_bw, so_bytes / v.so_bw)


def _a2a_reach(m: ModelSpec, v: _Shape):
    """Of a token's top-k experts: the distinct remote EP ranks and remote scale-up
    domains they live on, and the share of EP ranks beyond the sender's domain."""
    ep, width, top_k = v.ep, v.width, m.moe.top_k
    remote_ranks = np.where(ep > 1, _distinct(ep, 1.0, top_k) * (ep - 1) / ep, 0.0)
    nodes = np.maximum(1.0, width / v.domain)
    remote_nodes = np.where(nodes > 1, _distinct(nodes, 1.0, top_k) * (nodes - 1) / nodes, 0.0)
    outside = np.clip(1.0 - v.domain / width, 0.0, 1.0)
    return remote_ranks, remote_nodes, outside


def _latency(m: ModelSpec, v: _Shape, eff: Efficiency) -> np.ndarray:
    """Fixed latencies per stage: launches, collectives, all-to-all floors, the PP hop."""
    attn_kernels = (eff.kernels_attn_mla if m.attention is AttentionKind.MLA
                    else eff.kernels_attn_gqa)
    kernels = (v.n_layers * attn_kernels + v.n_dense * eff.kernels_ffn_dense
               + v.n_moe * eff.kernels_ffn_moe)
    latency_s = kernels * eff.kernel_launch_s
    latency_s = latency_s + np.where(v.tp > 1, 2.0 * v.n_layers * eff.tp_collective_s, 0.0)
    if m.moe is not None:
        a2a = np.where(v.width > v.domain, eff.a2a_scale_out_s, eff.a2a_scale_up_s)
        latency_s = latency_s + np.where(v.ep > 1, 2.0 * v.n_moe * a2a, 0.0)
    return latency_s + np.where(v.pp > 1, eff.pp_hop_s, 0.0)


def _kv_bytes(v: _Shape, sequences):
    """KV and recurrent state one GPU holds for `sequences` after the step."""
    kv = sequences * v.kv_layer * (
        v.n_full * v.ctx_end + v.n_slide * np.minimum(v.ctx_end, v.window))
    return kv + sequences * v.n_lin * v.state_layer / v.tp
