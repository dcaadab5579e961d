"""The planner's per-pool search: every PP x TP x EP x batch layout of one pool, priced
at the trace's shapes with the cost core in one vectorised pass.

Decode is judged on TPOT at the trace's high-percentile context (`PoolShape.check_context`)
and must hold `pp x batch` sequences of that context on every attention rank; a fill
is judged on the step time of a typical batch (its TTFT share; with `queued`, on that of
a prompt that waits for the step in progress and then takes its own, two steps) and must
hold the batch's prefixes at the pool's high-percentile input. With `memory_fraction`, a
layout is kept only when its weights, activations, buffers and the KV of its checked
batch fit within that fraction of HBM, as an engine's static memory fraction
(SGLang's `--mem-fraction-static`, vLLM's `--gpu-memory-utilization`) bounds what it
allocates. Among the layouts that meet the target and fit, the Pareto frontier of
tokens/s per GPU against latency is marked per instance size and the most productive
frontier point of each size is kept: the sizing step then trades instance size against
throughput (`costmodel.plan_sizing`).

`mixed_candidates` does the same for aggregated workers, which fill and decode: a step
is the decode batch plus a prefill chunk (`MIXED_CHUNK_TOKENS`), priced as the two
phases' steps added less one read of the weights, which the step reads once for both
(the cost core prices one phase per step), TPOT on that step and TTFT on a queued
prompt's steps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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

# A prompt that arrives at a busy fill worker waits for the step in progress (a full
# batch, at worst) and then takes its own: the TTFT target is checked on two steps.
QUEUED_STEPS = 2
# Prefill tokens a mixed step carries beside its decodes: the chunked-prefill budgets
# engines ship (SGLang's --chunked-prefill-size 2048-16384 by GPU memory, default 8192
# on large GPUs; vLLM's max_num_batched_tokens, 2048-16384 by usage context).
MIXED_CHUNK_TOKENS = (2048, 4096, 8192, 16384)


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
    # decode and mixed: TPOT at check_context; fills: the TTFT checked (one step of the
    # typical batch, or two when queued)
    latency_s: float
    tokens_per_s_per_gpu: float  # at the latency check's shape
    gpu_s_per_call: float  # GPU-seconds this pool spends per call of the trace's mix
    weight_bytes_per_gpu: float
    kv_bytes_per_gpu: float  # KV and state of a full worker at check_context
    hbm_bytes_per_gpu: float
    kv_capacity_tokens: int  # full-attention tokens one worker holds
    precision: Precision
    kv_precision: Precision
    mtp: int = 0  # decode: tokens drafted per step (the model's shipped MTP head)
    step_s: float = 0.0  # fills and mixed: one step of the checked batch
    # Mixed (aggregated) workers: prefill tokens a step carries beside its decodes (the
    # file's max_batch_tokens), and the queued TTFT of a typical prompt; 0 otherwise.
    chunk_tokens: int = 0
    ttft_s: float = 0.0

    @property
    def mixed(self) -> bool:
        return self.chunk_tokens > 0

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
                    kv: Precision, mtp: int = 0, *, memory_fraction: float | None = None,
                    queued: bool = False, eff: Efficiency = DEFAULT_EFFICIENCY,
                    ) -> tuple[list[Candidate], Best | None]:
    """The best frontier candidate of each instance size that meets `target_s` and fits,
    and the lowest latency any fitting layout reaches. `mtp`: decode's drafts per step;
    `eff`: the service's (its engine's host gaps, `costmodel.engines`);
    `memory_fraction`: the share of HBM a worker may allocate (None: HBM whole);
    `queued`: fills checked on two steps, the one in progress and their own."""
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
    latency = cost.tpot_s if decode else cost.step_time_s * (QUEUED_STEPS if queued else 1)
    per_rank = _sequences_per_rank(model, hw, pp, tp, ep, precision, kv, shape.check_context)
    fits = cost.fits & (pp * b <= per_rank)
    if memory_fraction is not None:
        fits &= cost.hbm_bytes_per_gpu <= memory_fraction * hw.hbm_bytes
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
        c = _candidate(model, hw, shape, precision, kv, mtp if decode else 0, cost, i,
                       int(pp[i]), int(tp[i]), int(ep[i]), int(b[i]), float(latency[i]), eff)
        if not decode:
            c = replace(c, step_s=float(cost.step_time_s[i]), ttft_s=float(latency[i]))
        out.append(c)
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


def mixed_candidates(model: ModelSpec, hw: HardwareSpec, fills: PoolShape, decode: PoolShape,
                     ttft_s: float, tpot_s: float, sizes: frozenset[int], grid: PlanGrid,
                     precision: Precision, kv: Precision, mtp: int = 0, *,
                     memory_fraction: float | None = None,
                     chunks: tuple[int, ...] = MIXED_CHUNK_TOKENS,
                     eff: Efficiency = DEFAULT_EFFICIENCY,
                     ) -> tuple[list[Candidate], Best | None]:
    """Aggregated workers (a cluster's `mixed` pool): per instance size, the layout,
    decode batch and prefill chunk that meets both targets, fits, and spends the fewest
    GPU-seconds per call (its fills and decodes together).

    A step carries the decode batch (at `decode.check_context`) and a chunk of `chunk`
    prefill tokens, chunk / ranks on each data-parallel attention rank (SGLang divides
    its chunked-prefill size by the DP size), at the fills' typical prefix; its time is
    the two phases' step times added less one read of the weights. TPOT is that step over
    the tokens a decode step yields; TTFT is a typical prompt's wait for the step in
    progress and then the ceil(new tokens / (chunk / ranks)) steps of its own (a prompt
    fills on one rank). Pipeline stages are left out (PP 1):
    aggregated engines run TP, EP and data-parallel attention replicas."""
    table = HardwareTable((hw,))
    flat = PlanGrid(pp=(1,), tp=grid.tp, ep=grid.ep, decode_batch=grid.decode_batch,
                    fill_batch=grid.fill_batch)
    pp, tp, ep, b = _grid(model, hw, flat, sizes, flat.decode_batch)
    dcfg = _configs(decode, pp, tp, ep, b, 1, decode.check_context, precision, kv, mtp)
    ok = valid_mask(model, table, dcfg)
    pp, tp, ep, b = pp[ok], tp[ok], ep[ok], b[ok]
    if not pp.size:
        return [], None
    dec = phase_cost(model, table, dcfg.select(ok), eff)
    ranks = np.maximum(tp, ep) // tp
    # The chunk's step, per distinct layout and chunk size.
    layouts, inverse = np.unique(np.stack([pp, tp, ep], axis=1), axis=0, return_inverse=True)
    inverse = inverse.ravel()
    lp, lt, le = (np.repeat(layouts[:, k], len(chunks)) for k in range(3))
    lc = np.tile(np.asarray(chunks, dtype=np.float64), len(layouts))
    lranks = np.maximum(lt, le) // lt
    fill = phase_cost(model, table, Configs.make(
        phase=int(Phase.PREFILL), batch=1, new_tokens=lc / lranks,
        context=fills.typical_context, pp=lp, tp=lt, ep=le, precision=int(precision),
        kv_precision=int(kv)), eff)
    rows = inverse[:, None] * len(chunks) + np.arange(len(chunks))[None, :]  # (n, chunks)
    # The two steps added, less one read of the weights: a mixed step reads them once
    # for its decodes and its chunk together (never more than either step takes).
    shared = np.minimum(dec.weight_bytes_per_gpu[:, None] / hw.hbm_bytes_per_s,
                        np.minimum(dec.step_time_s[:, None], fill.step_time_s[rows]))
    step = dec.step_time_s[:, None] + fill.step_time_s[rows] - shared
    tpot = step * (dec.tpot_s / dec.step_time_s)[:, None]
    chunk = np.asarray(chunks, dtype=np.float64)[None, :]
    ttft = step * (1.0 + np.ceil(fills.typical_new_tokens * ranks[:, None] / chunk))
    per_rank = _sequences_per_rank(model, hw, pp, tp, ep, precision, kv, decode.check_context)
    hbm = dec.hbm_bytes_per_gpu[:, None] + fill.activation_bytes_per_gpu[rows]
    fits = (dec.fits & (b <= per_rank))[:, None] & (hbm <= hw.hbm_bytes)
    if memory_fraction is not None:
        fits &= hbm <= memory_fraction * hw.hbm_bytes
    best = None
    if fits.any():
        i, j = np.unravel_index(np.argmin(np.where(fits, tpot, np.inf)), tpot.shape)
        best = Best(float(tpot[i, j]), f"mixed tp {tp[i]} ep {ep[i]} batch {b[i]} "
                    f"chunk {chunks[j]}")
    meets = fits & (tpot <= tpot_s) & (ttft <= ttft_s)
    # Ranking within a size: GPU-seconds per call at the checked shapes (the fill's
    # tokens at the chunk's rate, the decode tokens at the checked step's rate); the
    # kept candidate's work is then priced call by call, as a pool's is.
    fill_tokens = float(np.sum(fills.new_tokens)) / max(fills.total_calls, 1)
    dec_tokens = float(np.sum(decode.new_tokens)) / max(decode.total_calls, 1)
    proxy = (fill_tokens / fill.tokens_per_s_per_gpu[rows]
             + dec_tokens / dec.tokens_per_s_per_gpu[:, None])
    gpus = (pp * np.maximum(tp, ep)).astype(np.int64)
    out = []
    for g in np.unique(gpus[meets.any(axis=1)]):
        score = np.where(meets & (gpus == g)[:, None], proxy, np.inf)
        i, j = np.unravel_index(np.argmin(score), score.shape)
        p_, t_, e_, b_ = int(pp[i]), int(tp[i]), int(ep[i]), int(b[i])
        work = (work_per_call(model, hw, fills, p_, t_, e_, 1, precision, kv, 0, eff)
                + work_per_call(model, hw, decode, p_, t_, e_, b_, precision, kv, mtp, eff))
        cap = kv_capacity(model, hw, Layout(pp=p_, tp=t_, ep=e_, weights=precision, kv=kv))
        out.append(Candidate(
            phase=Phase.DECODE, pp=p_, tp=t_, ep=e_, batch=b_, gpus=int(g),
            ranks=int(ranks[i]), latency_s=float(tpot[i, j]),
            tokens_per_s_per_gpu=float(dec.tokens_per_s_per_gpu[i]), gpu_s_per_call=work,
            weight_bytes_per_gpu=float(dec.weight_bytes_per_gpu[i]),
            kv_bytes_per_gpu=float(dec.kv_bytes_per_gpu[i]), hbm_bytes_per_gpu=float(hbm[i, j]),
            kv_capacity_tokens=cap.kv_capacity_tokens, precision=precision, kv_precision=kv,
            mtp=mtp, step_s=float(step[i, j]), chunk_tokens=int(chunks[j]),
            ttft_s=float(ttft[i, j])))
    return out, best
