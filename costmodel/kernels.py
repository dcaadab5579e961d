"""A step's configuration arrays turned into what each stage does: the shape (`Shape`:
per-stage quantities every term uses) and the kernel groups' roofline times (`Kernels`,
from the term functions of `costmodel/terms.py`). `costmodel/phase.py` adds them into
a step; `costmodel/draft.py`, `costmodel/batch.py` and `costmodel/disagg.py` reuse them
for the MTP draft passes, heterogeneous batches and attention-FFN split instances.
"""

from __future__ import annotations

import numpy as np

from costmodel.configs import Configs, Phase
from costmodel.efficiency import Efficiency
from costmodel.hardware import HardwareTable
from costmodel.memory import dense_weight_bytes, expert_weight_bytes, stage_fraction
from costmodel.model_spec import ModelSpec
from costmodel.precision import BYTES_PER_ELEMENT, Precision
from costmodel.terms import (
    ACT_BYTES,
    NUMPY_OPS,
    Roof,
    a2a_reach,
    attention_bytes,
    attention_ctx_flops,
    attention_efficiency,
    attention_work,
    gemm,
    routed_experts,
)


class Shape:
    """The configuration arrays turned into per-stage quantities every term uses: the
    layout's (bandwidths, peaks, layers, bytes per element, the all-to-all's reach) and
    the batch's (`t_rank`, `t_group`, `n_seq`, `q_tok`, `decode`), both the `lay` and
    the `b` of `costmodel/terms.py`."""

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
        self.context = cfg.context  # tokens each sequence holds before the step
        self.ctx_end = cfg.context + self.q_tok  # KV length after the step
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
        self.peak_attn = peak[hw, Precision.BF16] * attention_efficiency(m, eff)
        kvb = np.array([BYTES_PER_ELEMENT[p] for p in Precision])[cfg.kv_precision]
        kv_split = 1.0 if m.attention == 0 else np.minimum(tp, m.gqa.kv_heads)
        self.kv_layer = m.kv_elems_per_token_layer * kvb / kv_split
        self.state_layer = (m.state_bytes_per_sequence(2.0) / max(m.n_linear_layers, 1)
                            if m.n_linear_layers else 0.0)
        self.window = max(m.sliding_window, 1)
        if m.moe is not None:
            self.disp = np.where(wprec >= Precision.FP8, 1.0, 2.0)  # dispatch bytes/elem
            self.split = np.maximum(1.0, tp / ep)  # experts tensor-split when tp > ep
            self.experts_per_rank = np.ceil(m.moe.routed_experts / ep)
            self.remote_ranks, self.remote_nodes, self.outside = a2a_reach(m, self)


class Kernels:
    """Per stage: each kernel group's roofline time, and the compute and HBM totals."""

    def __init__(self, m: ModelSpec, v: Shape, eff: Efficiency):
        d, tp, t_rank = float(m.hidden_size), v.tp, v.t_rank
        ops = NUMPY_OPS
        self.attention = w = attention_work(m, v, v, eff, ops)
        attn_ctx_flops = attention_ctx_flops(w, v.context, np.minimum)
        attn_bytes = attention_bytes(w, v.context, np.minimum)
        t_attn = np.maximum(w.proj_flops / v.peak_dense + attn_ctx_flops / v.peak_attn,
                            attn_bytes / v.hbm_bw)
        dense = gemm(t_rank, v.n_dense * m.dense_ffn_params, tp, v.peak_dense, v.wb_dense,
                     v.hbm_bw, ops)
        # MoE layers: router and shared experts on every token, routed experts by EP rank.
        if m.moe is not None:
            always = gemm(t_rank, v.n_moe * m.moe_always_params, tp, v.peak_dense, v.wb_dense,
                          v.hbm_bw, ops)
            experts = routed_experts(m, v, v, eff, ops)
            mo = m.moe
            self.exp_act = v.t_group * mo.top_k / v.ep * eff.ep_imbalance * (
                2 * mo.expert_intermediate + (mo.latent_size or d)) * ACT_BYTES
        else:
            always = experts = Roof(0.0, 0.0, 0.0)
            self.exp_act = 0.0
        # LM head (last stage): logits for every decode token, the last token of a fill.
        head = gemm(np.where(v.decode, t_rank, v.n_seq), m.vocab_size * d, tp, v.peak_dense,
                    v.wb_dense, v.hbm_bw, ops)

        self.compute_s = (w.proj_flops / v.peak_dense + attn_ctx_flops / v.peak_attn
                          + dense.flops / v.peak_dense + always.flops / v.peak_dense
                          + experts.flops / v.peak_exp + head.flops / v.peak_dense)
        hbm_read = attn_bytes + dense.hbm_bytes + experts.hbm_bytes + head.hbm_bytes
        if m.moe is not None:
            hbm_read = hbm_read + always.hbm_bytes
        self.hbm_read = hbm_read
        self.memory_s = hbm_read / v.hbm_bw
        # Kept per group so a split instance (costmodel/disagg.py) can price each side.
        self.t_attn, self.t_dense, self.t_always = t_attn, dense.time_s, always.time_s
        self.t_experts, self.t_head, self.exp_bytes = experts.time_s, head.time_s, experts.hbm_bytes
        self.head_flops = head.flops
        self.t_cm = t_attn + self.t_dense + self.t_always + self.t_experts + self.t_head
        self.flops = (w.proj_flops + attn_ctx_flops + dense.flops + always.flops
                      + experts.flops + head.flops)


def kv_bytes(v: Shape, sequences):
    """KV and recurrent state one GPU holds for `sequences` after the step."""
    kv = sequences * v.kv_layer * (
        v.n_full * v.ctx_end + v.n_slide * np.minimum(v.ctx_end, v.window))
    return kv + sequences * v.n_lin * v.state_layer / v.tp
