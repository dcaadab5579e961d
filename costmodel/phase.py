"""The vectorised phase cost: arrays of configurations in, arrays of costs out.

For one model and a table of hardware, each configuration (phase, batch, new
tokens, cached context, PP, TP, EP, precisions, hardware) gets the time of one
forward step, its FLOPs, HBM traffic, scale-up and scale-out traffic, energy,
resident HBM per GPU, and the bound that dominated. Everything is numpy
broadcasting: no Python loop over configurations.

A step is one micro-batch passing through all `pp` stages. Per stage, each
kernel group (attention, dense FFN, shared/router, routed experts, LM head)
takes the longer of its compute and memory time (roofline); communication is
added or overlapped according to `Efficiency.overlap`; fixed latencies
(launches, collectives, all-to-all floors, pipeline hops, host gap) are added.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import IntEnum

import numpy as np

from costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency, OverlapMode
from costmodel.hardware import HardwareTable
from costmodel.memory import (
    dense_weight_bytes,
    expert_weight_bytes,
    stage_fraction,
    weight_bytes_per_gpu,
)
from costmodel.model import ModelSpec
from costmodel.mtp import expected_tokens_per_step
from costmodel.precision import BYTES_PER_ELEMENT, Precision, default_attention_precision

ACT_BYTES = 2.0  # activations travel and rest in BF16


class Phase(IntEnum):
    PREFILL = 0  # new tokens, (almost) nothing cached
    MIDFILL = 1  # a long cached prefix plus a short new suffix
    DECODE = 2  # one token per sequence per step (more with MTP)


class Bound(IntEnum):
    COMPUTE = 0
    MEMORY = 1
    NETWORK = 2
    LATENCY = 3  # fixed per-kernel, per-collective and per-step latencies dominate


@dataclass(frozen=True)
class Configs:
    """Configuration arrays (broadcast together). `batch` is sequences per attention
    data-parallel rank per micro-batch; `new_tokens` per sequence (decode: ignored, one
    token plus `mtp` drafts); `context` the cached tokens each sequence already holds.
    `precision` is the routed experts'; `attention_precision` that of every other weight
    (attention, dense FFN, shared experts, router, LM head): None gives the default rule,
    `precision.default_attention_precision`."""

    phase: np.ndarray
    batch: np.ndarray
    new_tokens: np.ndarray
    context: np.ndarray
    pp: np.ndarray
    tp: np.ndarray
    ep: np.ndarray
    precision: np.ndarray
    hardware: np.ndarray
    kv_precision: np.ndarray
    mtp: np.ndarray
    attention_precision: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.attention_precision is None:
            object.__setattr__(self, "attention_precision",
                               default_attention_precision(self.precision))

    @classmethod
    def make(cls, *, phase, batch, new_tokens, context, pp=1, tp=1, ep=1,
             precision=Precision.FP8, hardware=0, kv_precision=Precision.BF16, mtp=0,
             attention_precision=None):
        if attention_precision is None:
            attention_precision = default_attention_precision(precision)
        arrays = np.broadcast_arrays(
            np.asarray(phase, dtype=np.int64), np.asarray(batch, dtype=np.float64),
            np.asarray(new_tokens, dtype=np.float64), np.asarray(context, dtype=np.float64),
            np.asarray(pp, dtype=np.float64), np.asarray(tp, dtype=np.float64),
            np.asarray(ep, dtype=np.float64), np.asarray(precision, dtype=np.int64),
            np.asarray(hardware, dtype=np.int64), np.asarray(kv_precision, dtype=np.int64),
            np.asarray(mtp, dtype=np.float64), np.asarray(attention_precision, dtype=np.int64),
        )
        return cls(*(np.ravel(a) for a in arrays))

    def __len__(self) -> int:
        return self.phase.shape[0]


@dataclass(frozen=True)
class PhaseCost:
    step_time_s: np.ndarray  # one micro-batch through all stages (TTFT of a prefill batch)
    tpot_s: np.ndarray  # decode: time per output token per sequence; else = step time
    tokens_per_step: np.ndarray  # new tokens produced per micro-batch over the instance
    tokens_per_s_per_gpu: np.ndarray
    gpus: np.ndarray  # GPUs of one instance (pp x stage width)
    flops: np.ndarray  # per step, whole instance
    hbm_read_bytes_per_gpu: np.ndarray  # per stage step
    scale_up_bytes_per_gpu: np.ndarray  # per stage step, sent
    scale_out_bytes_per_gpu: np.ndarray
    scale_up_bytes_per_s_per_gpu: np.ndarray  # averaged over the step
    scale_out_bytes_per_s_per_gpu: np.ndarray
    energy_j: np.ndarray  # one step of the instance
    energy_per_token_j: np.ndarray
    weight_bytes_per_gpu: np.ndarray
    kv_bytes_per_gpu: np.ndarray
    activation_bytes_per_gpu: np.ndarray
    comm_buffer_bytes_per_gpu: np.ndarray
    hbm_bytes_per_gpu: np.ndarray  # resident: weights + KV/state + activations + buffers
    hbm_bytes_per_gpu_double_buffered: np.ndarray  # plus the next micro-batch's KV
    fits: np.ndarray  # bool: resident HBM within capacity
    compute_s: np.ndarray  # per stage, the parts the bound compares
    memory_s: np.ndarray
    network_s: np.ndarray
    latency_s: np.ndarray
    bound: np.ndarray  # Bound values

    def row(self, i: int = 0) -> dict[str, float]:
        return {f.name: getattr(self, f.name)[i].item() for f in fields(self)}


def _distinct(n_slots: float, picks_per_draw, draws):
    """Expected distinct slots hit when `draws` independent draws each pick
    `picks_per_draw` of `n_slots` uniformly."""
    miss = np.clip(1.0 - np.asarray(picks_per_draw) / n_slots, 0.0, 1.0)
    return n_slots * (1.0 - miss ** draws)


# Configurations per block: numpy's temporaries of a few thousand float64 stay in the
# L2 cache, which is ~3x faster than streaming million-element temporaries through
# DRAM. Every formula is elementwise, so blocking changes no bit of any result.
BLOCK_CONFIGS = 4096


def phase_cost(model: ModelSpec, hardware: HardwareTable, cfg: Configs,
               eff: Efficiency = DEFAULT_EFFICIENCY) -> PhaseCost:
    n = len(cfg)
    if n <= BLOCK_CONFIGS:
        return _phase_cost_block(model, hardware, cfg, eff)
    names = [f.name for f in fields(Configs)]
    parts = [
        _phase_cost_block(model, hardware, Configs(
            *(getattr(cfg, k)[s:s + BLOCK_CONFIGS] for k in names)), eff)
        for s in range(0, n, BLOCK_CONFIGS)
    ]
    return PhaseCost(*(np.concatenate([getattr(p, f.name) for p in parts])
                       for f in fields(PhaseCost)))


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
        self.t_group = self.t_rank * self.attn_ranks  # tokens per stage per micro-batch
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
        self.peak_dense = peak[hw, aprec] * eff.compute
        self.peak_exp = peak[hw, wprec] * eff.compute
        self.peak_attn = peak[hw, Precision.BF16] * eff.compute
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
        # Attention: projections, scores and values over the context, KV and state traffic.
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
        self.t_cm = t_attn + t_dense + t_always + t_experts + t_head
        self.flops = (attn_proj_flops + attn_ctx_flops + dense_flops + always_flops + exp_flops
                      + head_flops)


def _network(m: ModelSpec, v: _Shape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bytes each GPU sends per stage over scale-up and scale-out, and the time."""
    d, tp, ep, width = float(m.hidden_size), v.tp, v.ep, v.width
    tp_bytes = np.where(tp > 1, 2.0 * (tp - 1) / tp * v.t_rank * d * ACT_BYTES, 0.0)
    tp_bytes = tp_bytes * 2.0 * (v.n_layers)  # after attention and after the FFN
    su_bytes = tp_bytes
    so_bytes = np.zeros_like(tp_bytes)
    if m.moe is not None:
        mo = m.moe
        disp = np.where(v.wprec >= Precision.FP8, 1.0, 2.0)  # FP8 dispatch, BF16 combine
        per_token = d * (disp + ACT_BYTES)
        sent = v.t_group / width  # tokens each GPU scatters (sequence-parallel within TP)
        # Distinct remote EP ranks (and scale-up domains) a token's top-k experts live on.
        remote_ranks = np.where(ep > 1, _distinct(ep, 1.0, mo.top_k) * (ep - 1) / ep, 0.0)
        nodes = np.maximum(1.0, width / v.domain)
        remote_nodes = np.where(
            nodes > 1, _distinct(nodes, 1.0, mo.top_k) * (nodes - 1) / nodes, 0.0)
        outside = np.clip(1.0 - v.domain / width, 0.0, 1.0)  # share of ranks beyond the domain
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


def _latency(m: ModelSpec, v: _Shape, eff: Efficiency) -> np.ndarray:
    """Fixed latencies per stage: launches, collectives, all-to-all floors, the PP hop."""
    latency_s = v.n_layers * eff.kernels_per_layer * eff.kernel_launch_s
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


def _times(m: ModelSpec, hardware: HardwareTable, cfg: Configs, eff: Efficiency):
    v = _Shape(m, hardware, cfg, eff)
    k = _Kernels(m, v, eff)
    su_bytes, so_bytes, network_s = _network(m, v)
    latency_s = _latency(m, v, eff)
    stage_s = k.t_cm + network_s + latency_s
    if eff.overlap == OverlapMode.OVERLAP:
        stage_s = stage_s - eff.overlap_fraction * np.minimum(k.t_cm, network_s)
    step_s = v.pp * stage_s + eff.step_overhead_s
    # Tokens a decode step yields per sequence: one plus the accepted MTP drafts.
    accepted = expected_tokens_per_step(cfg.mtp, eff.mtp_acceptance)
    tpot_s = np.where(v.decode, step_s / accepted, step_s)
    return v, k, su_bytes, so_bytes, network_s, latency_s, stage_s, step_s, accepted, tpot_s


def step_times(model: ModelSpec, hardware: HardwareTable, cfg: Configs,
               eff: Efficiency = DEFAULT_EFFICIENCY) -> tuple[np.ndarray, np.ndarray]:
    """(step_time_s, tpot_s) alone: what a worker needs, for a fraction of the work."""
    times = _times(model, hardware, cfg, eff)
    return times[7], times[9]


def _phase_cost_block(model: ModelSpec, hardware: HardwareTable, cfg: Configs,
                      eff: Efficiency) -> PhaseCost:
    m = model
    (v, k, su_bytes, so_bytes, network_s, latency_s, stage_s, step_s, accepted,
     tpot_s) = _times(m, hardware, cfg, eff)
    d, pp = float(m.hidden_size), v.pp
    cols = hardware.columns()
    tdp, hbm_cap = cols["tdp_w"][v.hw], cols["hbm_bytes"][v.hw]

    tokens_per_seq = np.where(v.decode, accepted, cfg.new_tokens)
    tokens_per_step = v.n_seq * v.attn_ranks * tokens_per_seq
    gpus = pp * v.width
    # pp micro-batches are in flight: every step time, pp of them finish.
    tokens_per_s_per_gpu = tokens_per_step * pp / (step_s * gpus)
    busy = np.clip(np.maximum(k.compute_s, k.memory_s) / stage_s, 0.0, 1.0)
    power_w = gpus * tdp * (eff.idle_power_fraction + (1 - eff.idle_power_fraction) * busy)
    energy_j = power_w * step_s
    energy_per_token_j = power_w / (tokens_per_s_per_gpu * gpus)

    weights = weight_bytes_per_gpu(m, pp=pp, tp=v.tp, ep=v.ep, precision=v.wprec,
                                   attention_precision=v.aprec)
    # Each stage holds KV for the pp micro-batches in flight: flat in pp (the crossover).
    kv = _kv_bytes(v, pp * v.n_seq)
    acts = v.t_rank * d * ACT_BYTES * 4.0 + k.exp_act
    # One layer's all-to-all, send and receive.
    comm_buf = 2.0 * (su_bytes + so_bytes) / np.maximum(v.n_layers, 1.0)
    resident = weights + kv + acts + comm_buf
    double = resident + kv / np.maximum(pp, 1.0) + acts

    bound = np.argmax(np.stack([k.compute_s, k.memory_s, network_s, latency_s + (
        eff.step_overhead_s / pp)]), axis=0)
    return PhaseCost(
        step_time_s=step_s, tpot_s=tpot_s, tokens_per_step=tokens_per_step,
        tokens_per_s_per_gpu=tokens_per_s_per_gpu, gpus=gpus, flops=k.flops * gpus,
        hbm_read_bytes_per_gpu=k.hbm_read, scale_up_bytes_per_gpu=su_bytes,
        scale_out_bytes_per_gpu=so_bytes,
        scale_up_bytes_per_s_per_gpu=su_bytes / stage_s,
        scale_out_bytes_per_s_per_gpu=so_bytes / stage_s,
        energy_j=energy_j, energy_per_token_j=energy_per_token_j,
        weight_bytes_per_gpu=weights, kv_bytes_per_gpu=kv, activation_bytes_per_gpu=acts,
        comm_buffer_bytes_per_gpu=comm_buf, hbm_bytes_per_gpu=resident,
        hbm_bytes_per_gpu_double_buffered=double, fits=resident <= hbm_cap,
        compute_s=k.compute_s, memory_s=k.memory_s, network_s=network_s,
        latency_s=latency_s, bound=bound,
    )


def evaluate(model: ModelSpec, hardware, phase: Phase, batch: float, new_tokens: float,
             context: float, layout, eff: Efficiency = DEFAULT_EFFICIENCY) -> dict[str, float]:
    """One configuration, checked: the layout must be possible (LayoutError otherwise).
    Whether it fits in HBM is a figure (`fits`), not a refusal."""
    from costmodel.layout import check_structure

    check_structure(model, hardware, layout)
    table = HardwareTable((hardware,))
    cfg = Configs.make(phase=int(phase), batch=batch, new_tokens=new_tokens, context=context,
                       pp=layout.pp, tp=layout.tp, ep=layout.ep, precision=int(layout.weights),
                       kv_precision=int(layout.kv), mtp=layout.mtp,
                       attention_precision=int(layout.attention_precision))
    return phase_cost(model, table, cfg, eff).row(0)
