"""Attention-FFN disaggregation: a decode step whose routed experts run on their own GPUs.

An attention instance (hardware A, `tp` x attention DP ranks) holds the KV cache,
the attention and dense layers, the router, the shared experts and the LM head.
An expert instance (hardware E, `ep` GPUs) holds only the routed experts; it may
serve several attention instances (`attention_instances`, N:1). In every MoE
layer each token goes attention -> experts -> attention: dispatch and combine
cross scale-up when both instances sit in one scale-up domain, else scale-out
(the source essay, docs/sources.md: fewer experts per GPU read faster, at the price of heavy
all-to-all).

Every term is the colocated phase cost's (`costmodel/phase.py`), evaluated on
each side: the attention side is a one-rank instance of width `tp` (every DP
rank does the same work), the expert side an `ep`-wide instance that receives
all the tokens. Two micro-batches ping-pong between the sides, so attention,
expert and network time hide behind each other as `Efficiency.overlap` lets
communication hide behind compute in a colocated stage.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from costmodel.configs import Configs, Phase
from costmodel.draft import draft_passes
from costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency, OverlapMode
from costmodel.errors import CostModelError, LayoutError
from costmodel.hardware import HardwareSpec, HardwareTable
from costmodel.kernels import Kernels, Shape, kv_bytes
from costmodel.layout import Layout, check_structure
from costmodel.memory import expert_weight_bytes, weight_bytes_per_gpu
from costmodel.model import ModelSpec
from costmodel.mtp import expected_tokens_per_step
from costmodel.precision import Precision
from costmodel.terms import ACT_BYTES, distinct, fixed_latency, network


@dataclass(frozen=True)
class AFLayout(Layout):
    """A decode instance's layout whose routed experts live on a separate expert instance.

    `tp` and `ep` set the attention instance as for a colocated stage: `max(tp, ep)`
    GPUs, attention DP ranks `max(tp, ep) / tp`; no routed expert is on them."""

    experts_hardware: HardwareSpec | None = None
    experts_ep: int = 1
    experts_weights: Precision = Precision.FP8
    attention_per_expert: int = 1  # attention instances sharing one expert instance
    same_domain: bool = False  # both instances in one scale-up domain

    def __post_init__(self) -> None:
        if self.experts_hardware is None:
            raise LayoutError("experts_hardware: required for an attention-FFN split")
        for name in ("experts_ep", "attention_per_expert"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LayoutError(f"{name}={value!r}: expected a positive integer")

    @property
    def split_gpus(self) -> int:
        """GPUs of one expert instance and the attention instances it serves."""
        return self.attention_per_expert * self.instance_gpus + self.experts_ep


def expert_slice_bytes_per_gpu(model: ModelSpec, ep, precision):
    """Routed-expert weights on one GPU of an `ep`-wide expert instance (the routed term
    of `memory.weight_bytes_per_gpu` with one stage and no tensor split)."""
    if model.moe is None:
        return np.zeros(np.shape(ep))
    per_rank = np.ceil(model.moe.routed_experts / np.asarray(ep, dtype=np.float64))
    return model.n_moe_layers * per_rank * model.expert_params * expert_weight_bytes(
        model, precision)


def attention_weight_bytes_per_gpu(model: ModelSpec, tp, precision, attention_precision=None):
    """Everything but the routed experts, on one GPU of a TP group (one stage).
    `precision` is the routed experts'; `attention_precision` the rest's (None: the
    default rule)."""
    full = weight_bytes_per_gpu(model, pp=1, tp=tp, ep=tp, precision=precision,
                                attention_precision=attention_precision)
    return full - expert_slice_bytes_per_gpu(model, tp, precision)


def check_af_layout(model: ModelSpec, hw: HardwareSpec, layout: AFLayout,
                    memory: bool = True) -> None:
    """Raise LayoutError naming the broken rule and by how much; return if it can run.
    `memory=False` leaves out the weight fit of either side (then `fits` reports it)."""
    if model.moe is None:
        raise LayoutError(f"{model.name} has no routed experts to put on an expert instance")
    if layout.pp != 1:
        raise LayoutError(f"pp={layout.pp}: an attention-FFN split instance has one stage")
    # The colocated rules, except the weight fit: routed experts are not on these GPUs.
    check_structure(model, hw, layout)
    att = float(attention_weight_bytes_per_gpu(model, layout.tp, int(layout.weights),
                                               int(layout.attention_precision)))
    if memory and att > hw.hbm_bytes:
        raise LayoutError(
            f"the attention slice does not fit: {att / 1e9:.1f} GB per GPU > "
            f"{hw.hbm_bytes / 1e9:.1f} GB HBM of {hw.name}; raise tp")
    ehw, ep = layout.experts_hardware, layout.experts_ep
    if ep > model.moe.routed_experts:
        raise LayoutError(f"experts_ep={ep} is larger than the {model.moe.routed_experts} "
                          f"routed experts of {model.name}")
    exp = float(expert_slice_bytes_per_gpu(model, ep, int(layout.experts_weights)))
    if memory and exp > ehw.hbm_bytes:
        raise LayoutError(
            f"experts_ep={ep}: the expert slice does not fit: {exp / 1e9:.1f} GB per GPU > "
            f"{ehw.hbm_bytes / 1e9:.1f} GB HBM of {ehw.name} (over by "
            f"{(exp - ehw.hbm_bytes) / 1e9:.1f} GB); raise experts_ep")
    domain = min(hw.scale_up_domain_gpus, ehw.scale_up_domain_gpus)
    if layout.same_domain and layout.split_gpus > domain:
        raise LayoutError(
            f"same_domain: {layout.attention_per_expert} x {layout.instance_gpus} attention + "
            f"{ep} expert GPUs exceed the {domain}-GPU scale-up domain")


@dataclass(frozen=True)
class AFCost:
    """One split decode step. Per-GPU figures are per step; `gpus` is one attention
    instance plus its share of the expert instance."""

    step_time_s: np.ndarray
    tpot_s: np.ndarray
    tokens_per_step: np.ndarray  # one attention instance
    tokens_per_s_per_gpu: np.ndarray
    gpus: np.ndarray
    attention_s: np.ndarray  # kernels of the attention side (roofline per group)
    expert_s: np.ndarray  # routed experts on the busiest expert GPU
    network_s: np.ndarray  # TP all-reduces plus attention <-> expert all-to-all
    a2a_s: np.ndarray  # of which attention <-> expert
    latency_s: np.ndarray
    draft_s: np.ndarray  # the MTP draft passes of one step
    attention_a2a_bytes_per_gpu: np.ndarray  # dispatch sent + combine received
    expert_a2a_bytes_per_gpu: np.ndarray
    experts_read_per_gpu_per_layer: np.ndarray  # distinct experts whose weights load
    expert_hbm_read_bytes_per_gpu: np.ndarray
    attention_energy_j: np.ndarray  # one attention instance, one step
    expert_energy_j: np.ndarray  # the whole expert instance, one step
    energy_per_token_j: np.ndarray
    attention_weight_bytes_per_gpu: np.ndarray
    kv_bytes_per_gpu: np.ndarray
    attention_hbm_bytes_per_gpu: np.ndarray  # resident: weights + KV + activations + buffers
    expert_weight_bytes_per_gpu: np.ndarray
    expert_hbm_bytes_per_gpu: np.ndarray
    fits: np.ndarray  # both sides within their HBM

    def row(self, i: int = 0) -> dict[str, float]:
        return {f.name: np.ravel(getattr(self, f.name))[i].item() for f in fields(self)}


def _sides(model, table, cfg, expert_hardware, expert_ep, expert_precision, eff, n_att):
    """The attention side (one rank of width tp) and the expert side (all tokens)."""
    # ep=1 keeps the colocated routed all-to-all and its floors out of network/fixed_latency.
    va = Shape(model, table, replace(cfg, ep=np.ones_like(cfg.tp)), eff)
    ranks = np.maximum(cfg.tp, cfg.ep) / cfg.tp
    tokens = n_att * va.t_rank * ranks  # arriving at the expert instance per micro-batch
    exp_cfg = Configs(
        phase=cfg.phase, batch=tokens / (va.q_tok * expert_ep), new_tokens=cfg.new_tokens,
        context=np.zeros_like(cfg.context), pp=cfg.pp, tp=np.ones_like(cfg.tp), ep=expert_ep,
        precision=expert_precision, hardware=expert_hardware, kv_precision=cfg.kv_precision,
        mtp=cfg.mtp, attention_precision=cfg.attention_precision)
    ve = Shape(model, table, exp_cfg, eff)
    return va, Kernels(model, va, eff), ve, Kernels(model, ve, eff), ranks, tokens


def af_decode_times(model: ModelSpec, table: HardwareTable, cfg: Configs, expert_hardware,
                    expert_ep, expert_precision, eff: Efficiency = DEFAULT_EFFICIENCY,
                    same_domain=False, attention_instances=1):
    """(step_time_s, tpot_s, AFCost) of decode steps of attention instances `cfg` (pp=1)
    whose routed experts run on `expert_ep` GPUs of `table[expert_hardware]`. Arguments
    broadcast against `cfg`'s arrays."""
    m = model
    if m.moe is None:
        raise CostModelError(f"{m.name} has no routed experts to put on an expert instance")
    if np.any(cfg.phase != Phase.DECODE) or np.any(cfg.pp != 1):
        raise CostModelError("attention-FFN split prices one-stage decode steps only")
    e_hw = np.asarray(expert_hardware, dtype=np.int64)
    e_ep = np.asarray(expert_ep, dtype=np.float64)
    e_prec = np.asarray(expert_precision, dtype=np.int64)
    same = np.asarray(same_domain, dtype=bool)
    n_att = np.asarray(attention_instances, dtype=np.float64)
    va, ka, ve, ke, ranks, tokens = _sides(m, table, cfg, e_hw, e_ep, e_prec, eff, n_att)
    t_att = ka.t_attn + ka.t_dense + ka.t_always + ka.t_head
    t_exp = ke.t_experts
    _, _, tp_net_s = network(m, va, va)  # TP all-reduces only: ep=1 and one stage
    att_bytes, exp_bytes, a2a_s = _a2a(m, table, cfg, va, e_hw, e_ep, tokens, same, eff)
    network_s = tp_net_s + a2a_s
    floor_s = np.where(same, eff.a2a_scale_up_s, eff.a2a_scale_out_s)
    latency_s = fixed_latency(m, va, eff) + 2.0 * va.n_moe * floor_s  # dispatch and combine
    stage_s = _stage_s(t_att, t_exp, network_s, latency_s, eff)
    accepted = expected_tokens_per_step(cfg.mtp, eff.mtp_acceptance)
    # MTP drafts: the module priced as one colocated layer of the attention instance
    # (its shape, its tp and ep), after the main pass.
    draft_s = draft_passes(m, table, cfg, eff, accepted).time_s
    step_s = stage_s + draft_s + eff.step_overhead_s
    tpot_s = step_s / accepted

    width = va.tp * ranks
    tokens_per_step = cfg.batch * ranks * accepted
    gpus = width + e_ep / n_att
    cols = table.columns()
    tdp, cap = cols["tdp_w"], cols["hbm_bytes"]
    idle = eff.idle_power_fraction
    att_w = width * tdp[cfg.hardware] * (idle + (1 - idle) * np.clip(t_att / stage_s, 0, 1))
    exp_w = e_ep * tdp[e_hw] * (idle + (1 - idle) * np.clip(t_exp / stage_s, 0, 1))
    energy_per_token_j = (att_w + exp_w / n_att) * step_s / tokens_per_step

    att_weights, kv, att_hbm, exp_weights, exp_hbm = _hbm(m, cfg, va, ke, e_ep, e_prec,
                                                          att_bytes, exp_bytes)
    parts = _broadcast(AFCost(
        step_time_s=step_s, tpot_s=tpot_s, tokens_per_step=tokens_per_step,
        tokens_per_s_per_gpu=tokens_per_step / (step_s * gpus), gpus=gpus,
        attention_s=t_att, expert_s=t_exp, network_s=network_s, a2a_s=a2a_s,
        latency_s=latency_s, draft_s=draft_s, attention_a2a_bytes_per_gpu=att_bytes,
        expert_a2a_bytes_per_gpu=exp_bytes,
        experts_read_per_gpu_per_layer=ke.exp_bytes / (ve.n_moe * m.expert_params * ve.wb_exp),
        expert_hbm_read_bytes_per_gpu=ke.exp_bytes,
        attention_energy_j=att_w * step_s, expert_energy_j=exp_w * step_s,
        energy_per_token_j=energy_per_token_j, attention_weight_bytes_per_gpu=att_weights,
        kv_bytes_per_gpu=kv, attention_hbm_bytes_per_gpu=att_hbm,
        expert_weight_bytes_per_gpu=exp_weights, expert_hbm_bytes_per_gpu=exp_hbm,
        fits=(att_hbm <= cap[cfg.hardware]) & (exp_hbm <= cap[e_hw]),
    ))
    return parts.step_time_s, parts.tpot_s, parts


def _stage_s(t_att, t_exp, network_s, latency_s, eff: Efficiency):
    """A stage of the split instance: its three serial parts (attention, experts, network)
    with the overlap rule, plus its fixed latencies."""
    serial_s = t_att + t_exp + network_s
    hidden_s = 0.0
    if eff.overlap == OverlapMode.OVERLAP:
        # Ping-pong of two micro-batches: the colocated rule (hide a fraction of the shorter
        # of two parts) generalised to three parts: hide a fraction of all but the longest.
        longest = np.maximum(np.maximum(t_att, t_exp), network_s)
        hidden_s = eff.overlap_fraction * (serial_s - longest)
    return serial_s - hidden_s + latency_s


def _a2a(m: ModelSpec, table: HardwareTable, cfg: Configs, va, e_hw, e_ep, tokens, same,
         eff: Efficiency):
    """The all-to-all between the sides: bytes each attention GPU and each expert GPU
    sends and receives per stage, and its time over the slower side's links."""
    # Dispatch (FP8 or BF16) and BF16 combine per token and distinct expert GPU, as in
    # network's decode all-to-all; every expert GPU is remote to the attention side.
    per_token = m.hidden_size * (np.where(va.wprec >= Precision.FP8, 1.0, 2.0) + ACT_BYTES)
    hit = distinct(e_ep, 1.0, m.moe.top_k)
    att_bytes = va.n_moe * va.t_rank / va.tp * hit * per_token
    exp_bytes = va.n_moe * tokens * hit / e_ep * per_token
    cols = table.columns()

    def link(hw):
        return np.where(same, cols["scale_up_bytes_per_s"][hw] * eff.scale_up,
                        cols["scale_out_bytes_per_s"][hw] * eff.scale_out)

    return att_bytes, exp_bytes, np.maximum(att_bytes / link(cfg.hardware),
                                            exp_bytes / link(e_hw))


def _hbm(m: ModelSpec, cfg: Configs, va, ke, e_ep, e_prec, att_bytes, exp_bytes):
    """HBM per GPU of each side: the attention side's weights, its KV and the total;
    the expert side's weights and the total (activations and one layer's all-to-all
    buffers, send and receive, on both)."""
    att_weights = attention_weight_bytes_per_gpu(m, cfg.tp, cfg.precision,
                                                 cfg.attention_precision)
    kv = kv_bytes(va, va.n_seq)
    n_moe = np.maximum(va.n_moe, 1.0)
    att_hbm = att_weights + kv + va.t_rank * m.hidden_size * ACT_BYTES * 4.0 + (
        2.0 * att_bytes / n_moe)  # one layer's all-to-all, send and receive
    exp_weights = expert_slice_bytes_per_gpu(m, e_ep, e_prec)
    exp_hbm = exp_weights + ke.exp_act + 2.0 * exp_bytes / n_moe
    return att_weights, kv, att_hbm, exp_weights, exp_hbm


def _broadcast(cost: AFCost) -> AFCost:
    """Every figure as an array of the configurations' common shape."""
    arrays = np.broadcast_arrays(*(np.asarray(getattr(cost, f.name)) for f in fields(cost)))
    return AFCost(*(np.array(a) for a in arrays))


def af_evaluate(model: ModelSpec, hardware: HardwareSpec, layout: AFLayout, batch: float,
                context: float, eff: Efficiency = DEFAULT_EFFICIENCY,
                memory: bool = True) -> dict[str, float]:
    """One split decode configuration, checked (LayoutError if it cannot run; with
    `memory=False` a side whose weights overflow HBM is reported by `fits` instead)."""
    check_af_layout(model, hardware, layout, memory)
    table = HardwareTable((hardware, layout.experts_hardware))
    cfg = Configs.make(phase=int(Phase.DECODE), batch=batch, new_tokens=1, context=context,
                       tp=layout.tp, ep=layout.ep, precision=int(layout.weights),
                       kv_precision=int(layout.kv), mtp=layout.mtp,
                       attention_precision=int(layout.attention_precision))
    _, _, parts = af_decode_times(model, table, cfg, 1, layout.experts_ep,
                                  int(layout.experts_weights), eff, layout.same_domain,
                                  layout.attention_per_expert)
    return parts.row(0)
