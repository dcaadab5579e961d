"""Which candidate layouts a benchmark emulates: a first-order estimate from the cost core.

Every candidate worker is priced at the load's typical call over the planner's decode
batches (sequences per attention rank, as many as its KV holds at the longest call):
decode's time per output token and, for a mixed worker, the prefill of one prompt
beside it. Each (layout, batch) is a point of estimated interactivity (1 / TPOT) and
throughput per GPU; a layout's score is how many points of the estimated Pareto
frontier it owns. The emulation, not this estimate, gives the figures; the estimate
only chooses which layouts are worth emulating when there are more than the search
keeps (`orchestrator.bench.layouts`).
"""

from __future__ import annotations

import numpy as np

from costmodel.capacity import kv_capacity
from costmodel.hardware import HardwareTable
from costmodel.layout import Layout
from costmodel.pareto import pareto_mask
from costmodel.phase import Configs, Phase, phase_cost
from costmodel.plan_candidates import PlanGrid

BATCHES = PlanGrid().decode_batch


def _points(r, pool, decode_only: bool) -> tuple[np.ndarray, np.ndarray]:
    """(estimated TPOT, estimated tokens/s per GPU) of `pool`'s worker over the batches
    its KV holds."""
    table = HardwareTable((r.hardware,))
    isl, osl = float(np.mean(r.inputs)), float(np.mean(r.outputs))
    layout = Layout(pp=pool.pp, tp=pool.tp, ep=pool.ep, weights=r.precision,
                    kv=r.kv_precision)
    cap = kv_capacity(r.model, r.hardware, layout)
    per_rank = cap.sequences_at(float(np.max(r.inputs + r.outputs))) // max(cap.ranks, 1)
    batches = np.array([b for b in BATCHES if b * pool.pp <= max(per_rank, 1)], dtype=np.float64)
    common = {"pp": pool.pp, "tp": pool.tp, "ep": pool.ep, "precision": int(r.precision),
              "kv_precision": int(r.kv_precision)}
    dec = phase_cost(r.model, table, Configs.make(
        phase=int(Phase.DECODE), batch=batches, new_tokens=1, context=isl + osl / 2,
        mtp=max(r.mtps), **common))
    if decode_only:
        return dec.tpot_s, dec.tokens_per_s_per_gpu
    fill = phase_cost(r.model, table, Configs.make(
        phase=int(Phase.PREFILL), batch=1, new_tokens=isl, context=0.0, **common))
    # A call's worker time: its prompt's prefill, and its share of the decode steps of
    # the batch it decodes in (batch x ranks x stages sequences a step).
    sequences = batches * pool.ranks * pool.pp
    worker_s = fill.step_time_s[0] + osl * dec.tpot_s / sequences
    return dec.tpot_s, (isl + osl) / (worker_s * pool.worker_gpus)


def rank_layouts(r, pools: list, keep: int, decode_only: bool = False) -> list:
    """The `keep` pools (candidate workers, `layouts.PoolLayout`) owning most points of
    the estimated frontier; ties to the more productive, then the smaller worker, then
    the order given. All of them, in that order, when there are no more than `keep`."""
    if len(pools) <= keep:
        return list(pools)
    tpots, tputs, owner = [], [], []
    for i, pool in enumerate(pools):
        tpot, tput = _points(r, pool, decode_only)
        tpots.append(tpot)
        tputs.append(tput)
        owner.append(np.full(len(tpot), i))
    tpot, tput, owner = (np.concatenate(a) for a in (tpots, tputs, owner))
    on = pareto_mask(tpot, tput)
    owned = np.bincount(owner[on], minlength=len(pools))
    best = [float(np.max(t)) if len(t) else 0.0 for t in tputs]
    order = sorted(range(len(pools)),
                   key=lambda i: (-owned[i], -best[i], pools[i].worker_gpus, i))
    return [pools[i] for i in order[:keep]]
