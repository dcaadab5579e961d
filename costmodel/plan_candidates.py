"""The planner's per-pool search: every PP x TP x EP x batch layout of one pool, priced
at the trace's shapes with the cost core in one vectorised pass.

Decode is judged on TPOT at the trace's high-percentile context (`PoolShape.check_context`)
and must hold `pp x batch` sequences of that context on every attention rank; a fill
is judged on the step time of a typical batch (its TTFT share) and must hold the batch's
prefixes at the pool's high-percentile input. Among the layouts that meet the target and
fit, the Pareto frontier of tokens/s per GPU against latency is marked per instance size
and the most productive frontier point of each size is kept: the sizing step then trades
instance size against throughput (`costmodel.plan_sizing`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.capacity import kv_capacity
from costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from costmodel.hardware import HardwareSpec, HardwareTable
from costmodel.layout import Layout
from costmodel.model import ModelSpec
from costmodel.pareto import pareto_mask_grouped
from costmodel.phase import Configs, Phase, phase_cost
from costmodel.precision import Precision
from costmodel.sweep import valid_mask


@dataclass(frozen=True)
class PlanGrid:
    """Axes the planner searches. `batch` is sequences per attention rank per micro-batch."""

    pp: tuple[int, ...] = (1, 2, 4, 8)
    tp: tuple[int, ...] = (1, 2, 4, 8)
    ep: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    decode_batch: tuple[int, ...] = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
    fill_batch: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


@dataclass(frozen=True)
class PoolShape:
    """What one pool serves, from the trace. Per call arrays hold only the pool's calls:
    `new_tokens` computed per call (decode: tokens generated after the fill's first),
    `context_tokens` the cached prefix (decode: the mean KV length over its generation).
    `typical_*` is the batch the latency target is checked on; `check_context` the KV
    length every slot must hold. `total_calls` counts every call of the trace, so work
    per call is per call of the whole mix."""

    phase: Phase
    new_tokens: np.ndarray
    context_tokens: np.ndarray
    typical_new_tokens: float
    typical_context: float
    check_context: float
    total_calls: int

    @property
    def calls(self) -> int:
        return int(self.new_tokens.shape[0])


@dataclass(frozen=True)
class Candidate:
    """One layout and batch for one pool, with its figures at the pool's shapes."""

    phase: Phase
    pp: int
    tp: int
    ep: int
    batch: int  # sequences per attention rank per micro-batch
    gpus: int  # one worker: pp x max(tp, ep)
    ranks: int  # attention data-parallel ranks per stage
    latency_s: float  # decode: TPOT at check_context; fills: step time of the typical batch
    tokens_per_s_per_gpu: float  # at the latency check's shape
    gpu_s_per_call: float  # GPU-seconds this pool spends per call of the trace's mix
    weight_bytes_per_gpu: float
    kv_bytes_per_gpu: float  # KV and state of a full worker at check_context
    hbm_bytes_per_gpu: float
    kv_capacity_tokens: int  # full-attention tokens one worker holds
    precision: Precision
    kv_precision: Precision
    mtp: int = 0  # decode: tokens drafted per step (the model's shipped MTP head)

    @property
    def slots(self) -> int:
        """Sequences one worker runs together: decode over its pp micro-batches in
        flight, a fill per batch."""
        return self.batch * self.ranks * (self.pp if self.phase is Phase.DECODE else 1)

    @property
    def layout(self) -> Layout:
        return Layout(pp=self.pp, tp=self.tp, ep=self.ep, weights=self.precision,
                      kv=self.kv_precision, mtp=self.mtp)


@dataclass(frozen=True)
class Best:
    """The lowest latency any fitting layout reaches (for a target nobody meets)."""

    latency_s: float
    layout: str


def _grid(model: ModelSpec, hw: HardwareSpec, grid: PlanGrid, sizes: frozenset[int],
          batches: tuple[int, ...]):
    # Besides the grid's powers of two, expert widths that tile the scale-up domain
    # (12, 24, 36, 72 on NVL72): wide EP across the rack, and smaller workers.
    domain = hw.scale_up_domain_gpus
    tiles = {d for d in range(4, domain + 1, 4) if domain % d == 0 and d in sizes}
    eps = sorted(set(grid.ep) | tiles)
    pp, tp, ep, b = (a.ravel() for a in np.meshgrid(grid.pp, grid.tp, eps, batches,
                                                    indexing="ij"))
    gpus = pp * np.maximum(tp, ep)
    keep = np.isin(gpus, sorted(sizes))
    return pp[keep], tp[keep], ep[keep], b[keep]


def _configs(shape: PoolShape, pp, tp, ep, batch, new_tokens, context, precision, kv,
             mtp: int = 0):
    return Configs.make(phase=int(shape.phase), batch=batch, new_tokens=new_tokens,
                        context=context, pp=pp, tp=tp, ep=ep, precision=int(precision),
                        kv_precision=int(kv), mtp=mtp if shape.phase is Phase.DECODE else 0)


def _sequences_per_rank(model, hw, pp, tp, ep, precision, kv, context) -> np.ndarray:
    """Sequences of `context` tokens each attention rank holds, per distinct layout
    (costmodel.capacity: MLA latent replicated over TP, per-sequence state counted)."""
    out = np.zeros(pp.shape[0])
    layouts = np.stack([pp, tp, ep], axis=1)
    uniq, inverse = np.unique(layouts, axis=0, return_inverse=True)
    for i, (p, t, e) in enumerate(uniq.tolist()):
        cap = kv_capacity(model, hw, Layout(pp=p, tp=t, ep=e, weights=precision, kv=kv))
        out[inverse.ravel() == i] = cap.sequences_at(context) / max(cap.ranks, 1)
    return out


def pool_candidates(model: ModelSpec, hw: HardwareSpec, shape: PoolShape, target_s: float,
                    sizes: frozenset[int], grid: PlanGrid, precision: Precision,
                    kv: Precision, mtp: int = 0, eff: Efficiency = DEFAULT_EFFICIENCY,
                    ) -> tuple[list[Candidate], Best | None]:
    """The best frontier candidate of each instance size that meets `target_s` and fits,
    and the lowest latency any fitting layout reaches. `mtp`: decode's drafts per step;
    `eff`: the service's (its engine's host gaps, `costmodel.engines`)."""
    decode = shape.phase is Phase.DECODE
    table = HardwareTable((hw,))
    pp, tp, ep, b = _grid(model, hw, grid, sizes, grid.decode_batch if decode
                          else grid.fill_batch)
    cfg = _configs(shape, pp, tp, ep, b, 1 if decode else shape.typical_new_tokens,
                   shape.check_context if decode else shape.typical_context, precision, kv,
                   mtp)
    ok = valid_mask(model, table, cfg)
    pp, tp, ep, b = pp[ok], tp[ok], ep[ok], b[ok]
    cfg = cfg.select(ok)
    cost = phase_cost(model, table, cfg, eff)
    latency = cost.tpot_s if decode else cost.step_time_s
    per_rank = _sequences_per_rank(model, hw, pp, tp, ep, precision, kv, shape.check_context)
    fits = cost.fits & (pp * b <= per_rank)
    gpus = (pp * np.maximum(tp, ep)).astype(np.int64)
    best = None
    if fits.any():
        i = int(np.flatnonzero(fits)[np.argmin(latency[fits])])
        best = Best(float(latency[i]), f"pp {pp[i]} tp {tp[i]} ep {ep[i]} batch {b[i]}")
    frontier = pareto_mask_grouped(np.where(fits, gpus, -1), np.where(fits, latency, np.nan),
                                   cost.tokens_per_s_per_gpu) & fits
    meets = frontier & (latency <= target_s)
    out = []
    for g in np.unique(gpus[meets]):
        rows = np.flatnonzero(meets & (gpus == g))
        i = int(rows[np.argmax(cost.tokens_per_s_per_gpu[rows])])
        out.append(_candidate(model, hw, shape, precision, kv, mtp if decode else 0, cost, i,
                              int(pp[i]), int(tp[i]), int(ep[i]), int(b[i]), float(latency[i]),
                              eff))
    return out, best


def _candidate(model, hw, shape, precision, kv, mtp, cost, i, pp, tp, ep, batch, latency_s,
               eff):
    cap = kv_capacity(model, hw, Layout(pp=pp, tp=tp, ep=ep, weights=precision, kv=kv))
    return Candidate(
        phase=shape.phase, pp=pp, tp=tp, ep=ep, batch=batch, gpus=pp * max(tp, ep),
        ranks=max(tp, ep) // tp, latency_s=latency_s,
        tokens_per_s_per_gpu=float(cost.tokens_per_s_per_gpu[i]),
        gpu_s_per_call=work_per_call(model, hw, shape, pp, tp, ep, batch, precision, kv, mtp,
                                     eff),
        weight_bytes_per_gpu=float(cost.weight_bytes_per_gpu[i]),
        kv_bytes_per_gpu=float(cost.kv_bytes_per_gpu[i]),
        hbm_bytes_per_gpu=float(cost.hbm_bytes_per_gpu[i]),
        kv_capacity_tokens=cap.kv_capacity_tokens, precision=precision, kv_precision=kv,
        mtp=mtp)


def work_per_call(model: ModelSpec, hw: HardwareSpec, shape: PoolShape, pp: int, tp: int,
                  ep: int, batch: int, precision: Precision, kv: Precision,
                  mtp: int = 0, eff: Efficiency = DEFAULT_EFFICIENCY) -> float:
    """GPU-seconds the pool spends per call of the whole trace: each of its calls priced
    at its own shape in a full batch (tokens / tokens-per-s-per-GPU), summed, over all
    calls. Decode: the tokens after the first, at the call's mean KV length."""
    if shape.calls == 0 or shape.total_calls == 0:
        return 0.0
    new = np.maximum(shape.new_tokens, 1.0)
    cfg = _configs(shape, pp, tp, ep, batch, 1 if shape.phase is Phase.DECODE else new,
                   shape.context_tokens, precision, kv, mtp)
    tps = phase_cost(model, HardwareTable((hw,)), cfg, eff).tokens_per_s_per_gpu
    return float(np.sum(shape.new_tokens / tps) / shape.total_calls)
