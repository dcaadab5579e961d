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
from typing import NamedTuple

import numpy as np

from costmodel.configs import Configs, Phase
from costmodel.draft import DraftCost, draft_passes
from costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from costmodel.hardware import HardwareTable
from costmodel.kernels import Kernels, Shape, kv_bytes
from costmodel.memory import weight_bytes_per_gpu
from costmodel.model import ModelSpec
from costmodel.mtp import expected_tokens_per_step
from costmodel.terms import ACT_BYTES, fixed_latency, network, overlapped

__all__ = [
    "Bound",
    "Configs",
    "Phase",
    "PhaseCost",
    "StepTimes",
    "evaluate",
    "phase_cost",
    "step_times",
]


class Bound(IntEnum):
    COMPUTE = 0
    MEMORY = 1
    NETWORK = 2
    LATENCY = 3  # fixed per-kernel, per-collective and per-step latencies dominate


@dataclass(frozen=True)
class PhaseCost:
    step_time_s: np.ndarray  # one micro-batch through all stages (TTFT of a prefill batch)
    tpot_s: np.ndarray  # decode: time per output token per sequence; else = step time
    tokens_per_step: np.ndarray  # new tokens produced per micro-batch over the instance
    tokens_per_s_per_gpu: np.ndarray
    gpus: np.ndarray  # GPUs of one instance (pp x stage width)
    flops: np.ndarray  # per step, whole instance (MTP draft passes included)
    hbm_read_bytes_per_gpu: np.ndarray  # per stage step (the last stage's drafts included)
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
    draft_s: np.ndarray  # decode: the MTP draft passes of one step (costmodel/draft.py)
    bound: np.ndarray  # Bound values

    def row(self, i: int = 0) -> dict[str, float]:
        return {f.name: getattr(self, f.name)[i].item() for f in fields(self)}



# Configurations per block: numpy's temporaries of a few thousand float64 stay in the
# L2 cache, which is ~3x faster than streaming million-element temporaries through
# DRAM. Every formula is elementwise, so blocking changes no bit of any result.
BLOCK_CONFIGS = 4096


def phase_cost(model: ModelSpec, hardware: HardwareTable, cfg: Configs,
               eff: Efficiency = DEFAULT_EFFICIENCY) -> PhaseCost:
    n = len(cfg)
    if n <= BLOCK_CONFIGS:
        return _phase_cost_block(model, hardware, cfg, eff)
    parts = [
        _phase_cost_block(model, hardware, cfg.select(slice(s, s + BLOCK_CONFIGS)), eff)
        for s in range(0, n, BLOCK_CONFIGS)
    ]
    return PhaseCost(*(np.concatenate([getattr(p, f.name) for p in parts])
                       for f in fields(PhaseCost)))



class StepTimes(NamedTuple):
    """A step's parts: its shape and kernels, per stage the bytes each GPU sends and the
    network, latency and stage times, the step and its time per output token."""

    shape: Shape
    kernels: Kernels
    scale_up_bytes: np.ndarray
    scale_out_bytes: np.ndarray
    network_s: np.ndarray
    latency_s: np.ndarray
    stage_s: np.ndarray
    step_s: np.ndarray
    accepted: np.ndarray  # tokens a decode step yields per sequence
    tpot_s: np.ndarray
    draft: DraftCost


def step_parts(m: ModelSpec, hardware: HardwareTable, cfg: Configs,
               eff: Efficiency) -> StepTimes:
    v = Shape(m, hardware, cfg, eff)
    k = Kernels(m, v, eff)
    su_bytes, so_bytes, network_s = network(m, v, v)
    latency_s = fixed_latency(m, v, eff)
    stage_s = overlapped(k.t_cm, network_s, latency_s, eff, np.minimum)
    # Tokens a decode step yields per sequence: one plus the accepted MTP drafts.
    accepted = expected_tokens_per_step(cfg.mtp, eff.mtp_acceptance)
    # The MTP module drafts the next step's tokens after the main pass, one pass a draft.
    draft = draft_passes(m, hardware, cfg, eff, accepted)
    step_s = v.pp * stage_s + draft.time_s + eff.step_overhead_s
    tpot_s = np.where(v.decode, step_s / accepted, step_s)
    return StepTimes(shape=v, kernels=k, scale_up_bytes=su_bytes, scale_out_bytes=so_bytes,
                     network_s=network_s, latency_s=latency_s, stage_s=stage_s, step_s=step_s,
                     accepted=accepted, tpot_s=tpot_s, draft=draft)


def step_times(model: ModelSpec, hardware: HardwareTable, cfg: Configs,
               eff: Efficiency = DEFAULT_EFFICIENCY) -> tuple[np.ndarray, np.ndarray]:
    """(step_time_s, tpot_s) alone: what a worker needs, for a fraction of the work."""
    t = step_parts(model, hardware, cfg, eff)
    return t.step_s, t.tpot_s


def _phase_cost_block(model: ModelSpec, hardware: HardwareTable, cfg: Configs,
                      eff: Efficiency) -> PhaseCost:
    m = model
    t = step_parts(m, hardware, cfg, eff)
    v, k, draft, accepted, step_s, stage_s = t.shape, t.kernels, t.draft, t.accepted, t.step_s, t.stage_s
    su_bytes, so_bytes, network_s, latency_s = (t.scale_up_bytes, t.scale_out_bytes,
                                                t.network_s, t.latency_s)
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
                                   attention_precision=v.aprec,
                                   mtp=np.where(v.decode, cfg.mtp, 0.0))
    # Each stage holds KV for the pp micro-batches in flight: flat in pp (the crossover).
    kv = kv_bytes(v, pp * v.n_seq)
    acts = v.t_rank * d * ACT_BYTES * 4.0 + k.exp_act
    # One layer's all-to-all, send and receive.
    comm_buf = 2.0 * (su_bytes + so_bytes) / np.maximum(v.n_layers, 1.0)
    resident = weights + kv + acts + comm_buf
    double = resident + kv / np.maximum(pp, 1.0) + acts

    bound = np.argmax(np.stack([k.compute_s, k.memory_s, network_s, latency_s + (
        eff.step_overhead_s / pp)]), axis=0)
    return PhaseCost(
        step_time_s=step_s, tpot_s=t.tpot_s, tokens_per_step=tokens_per_step,
        tokens_per_s_per_gpu=tokens_per_s_per_gpu, gpus=gpus,
        flops=k.flops * gpus + draft.flops_per_gpu * v.width,
        hbm_read_bytes_per_gpu=k.hbm_read + draft.hbm_read_bytes_per_gpu,
        scale_up_bytes_per_gpu=su_bytes,
        scale_out_bytes_per_gpu=so_bytes,
        scale_up_bytes_per_s_per_gpu=su_bytes / stage_s,
        scale_out_bytes_per_s_per_gpu=so_bytes / stage_s,
        energy_j=energy_j, energy_per_token_j=energy_per_token_j,
        weight_bytes_per_gpu=weights, kv_bytes_per_gpu=kv, activation_bytes_per_gpu=acts,
        comm_buffer_bytes_per_gpu=comm_buf, hbm_bytes_per_gpu=resident,
        hbm_bytes_per_gpu_double_buffered=double, fits=resident <= hbm_cap,
        compute_s=k.compute_s, memory_s=k.memory_s, network_s=network_s,
        latency_s=latency_s, draft_s=draft.time_s, bound=bound,
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
