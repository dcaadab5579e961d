"""The layouts a benchmark runs: aggregated and disaggregated, as the public sweeps try.

A `BenchLayout` is pools of identical workers (a worker: `pp x max(tp, ep)` GPUs, its
attention over `max(tp, ep) / tp` data-parallel ranks) and the MTP drafts its decode
runs. Where they come from is a `LayoutSource`: `SweepLayouts` here, which searches the
GPUs as the public sweeps do (InferenceMAX's and the engines' recipes: TP, TP attention
with EP experts, DP attention with EP, on one or several replicas; prefill and decode
pools of their own), the disaggregated pools' layouts and worker counts from the
planner's candidates (`costmodel.plan_candidates`, `costmodel.plan_sizing`). Another
source (the planner, once it answers "how many GPUs for N users") plugs in beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import numpy as np

from costmodel.capacity import kv_capacity
from costmodel.errors import CostModelError
from costmodel.fill_phase import MIDFILL_MIN_PREFIX_TOKENS  # no prompt shares a prefix: prefill
from costmodel.hardware import HardwareSpec
from costmodel.layout import Layout, check_layout
from costmodel.model import ModelSpec
from costmodel.plan_candidates import Candidate, PlanGrid, pool_candidates
from costmodel.plan_sizing import Nodes, size_pools
from costmodel.plan_values import WorkloadStats
from costmodel.precision import Precision
from orchestrator.bench.screen import rank_layouts

# How many of each family the search keeps (before MTP variants): the best by the cost
# core's first-order estimate (`screen`), so a search stays near twenty layouts.
MAX_AGGREGATED = 6
MAX_DISAGGREGATED = 6
# Decode layouts (one per worker size and target) and prefill sizes paired in the
# disaggregated family.
MAX_DECODE_LAYOUTS = 3
MAX_PREFILL_SIZES = 2
# The planner's candidates at these targets: decode TPOT at the p90 context, fills the
# step time of a typical batch. Each target yields, per worker size, its most productive
# layout meeting it: tight targets give TP-heavy layouts, loose ones wide EP.
DECODE_TPOT_TARGETS_S = (0.005, 0.01, 0.02, 0.05, 0.2)
PREFILL_TTFT_TARGETS_S = (0.5, 2.0, 8.0)


class Family(Enum):
    AGGREGATED = "aggregated"  # mixed pools: every worker fills and decodes
    DISAGGREGATED = "disaggregated"  # prefill and decode pools


@dataclass(frozen=True)
class PoolLayout:
    phase: str  # "mixed", "prefill" or "decode" (the cluster file's)
    workers: int
    pp: int
    tp: int
    ep: int

    @property
    def worker_gpus(self) -> int:
        return self.pp * max(self.tp, self.ep)

    @property
    def gpus(self) -> int:
        return self.workers * self.worker_gpus

    @property
    def ranks(self) -> int:
        """Attention data-parallel ranks per stage."""
        return max(self.tp, self.ep) // self.tp

    def label(self) -> str:
        """`TP4`, `TEP8` (TP attention, EP experts), `DEP8` (DP attention, EP experts),
        `TP2 EP8`, with `PPn ` in front when pipelined (TensorRT-LLM's and the public
        sweeps' names)."""
        g = max(self.tp, self.ep)
        if self.ep == 1:
            core = f"TP{self.tp}"
        elif self.tp == self.ep:
            core = f"TEP{g}"
        elif self.tp == 1:
            core = f"DEP{g}"
        else:
            core = f"TP{self.tp} EP{self.ep}"
        return (f"PP{self.pp} " if self.pp > 1 else "") + core


@dataclass(frozen=True)
class BenchLayout:
    family: Family
    pools: tuple[PoolLayout, ...]
    mtp: int
    name_: str | None = None  # a cluster file's name; None: made from the pools

    @property
    def gpus(self) -> int:
        return sum(p.gpus for p in self.pools)

    @property
    def name(self) -> str:
        if self.name_ is not None:
            return self.name_
        if self.family is Family.AGGREGATED:
            (p,) = self.pools
            text = f"agg {p.workers}x {p.label()}"
        else:
            text = "disagg " + " + ".join(f"{p.workers}x {p.label()} {p.phase}"
                                          for p in self.pools)
        return text + (f" mtp{self.mtp}" if self.mtp else "")


@dataclass(frozen=True)
class LayoutRequest:
    """What a search is for: the model on `gpus` GPUs of `hardware`, the load's lengths
    (`inputs`, `outputs`: one typical draw of the calls), precisions, the MTP drafts to
    try (0: off)."""

    model: ModelSpec
    hardware: HardwareSpec
    gpus: int
    inputs: np.ndarray
    outputs: np.ndarray
    precision: Precision
    kv_precision: Precision
    mtps: tuple[int, ...]


class LayoutSource(Protocol):
    def layouts(self, request: LayoutRequest) -> list[BenchLayout]:
        """The layouts to run, in a deterministic order."""
        ...


class SweepLayouts:
    """The public sweeps' search (module doc)."""

    def __init__(self, grid: PlanGrid | None = None) -> None:
        self.grid = grid or PlanGrid()

    def layouts(self, request: LayoutRequest) -> list[BenchLayout]:
        agg = self.aggregated(request)
        disagg = self.disaggregated(request)
        out = []
        for mtp in request.mtps:
            out += [BenchLayout(Family.AGGREGATED, pools, mtp) for pools in agg]
            out += [BenchLayout(Family.DISAGGREGATED, pools, mtp) for pools in disagg]
        return out

    # -- aggregated: replicas of one mixed worker ------------------------------------
    def aggregated(self, r: LayoutRequest) -> list[tuple[PoolLayout, ...]]:
        nodes = Nodes.of(r.gpus, r.hardware.scale_up_domain_gpus)
        shapes = []
        for g in sorted(nodes.worker_sizes(r.gpus)):
            if r.gpus % g or not _swept_size(g, r.hardware):
                continue
            for tp, ep in _stage_shapes(r.model, g):
                pool = PoolLayout("mixed", r.gpus // g, 1, tp, ep)
                if _runs(r, pool):
                    shapes.append(pool)
        kept = rank_layouts(r, shapes, MAX_AGGREGATED)
        return [(p,) for p in kept]

    # -- disaggregated: prefill and decode pools from the planner's candidates -------
    def disaggregated(self, r: LayoutRequest) -> list[tuple[PoolLayout, ...]]:
        nodes = Nodes.of(r.gpus, r.hardware.scale_up_domain_gpus)
        if r.gpus < 2:
            return []
        shapes = WorkloadStats(
            sessions=1, input_tokens=r.inputs.astype(np.float64),
            cached_tokens=np.zeros(len(r.inputs)), output_tokens=r.outputs.astype(np.float64),
            session_time_s=1.0, midfill_min_prefix_tokens=MIDFILL_MIN_PREFIX_TOKENS).shapes()
        if "decode" not in shapes:
            return []  # nothing decodes: one output token a call
        sizes = frozenset(g for g in nodes.worker_sizes(r.gpus - 1))
        mtp = max(r.mtps)
        decode = self._decode_candidates(r, shapes["decode"], sizes, mtp)
        prefill = self._prefill_candidates(r, shapes["prefill"], sizes)
        out: list[tuple[PoolLayout, ...]] = []
        for d in decode:
            for p in prefill:
                sizing = size_pools([[p], [d]], nodes)
                if sizing is None:
                    continue
                pools = (PoolLayout("prefill", sizing.workers[0], p.pp, p.tp, p.ep),
                         PoolLayout("decode", sizing.workers[1], d.pp, d.tp, d.ep))
                if pools not in out:
                    out.append(pools)
        return out[:MAX_DISAGGREGATED]

    def _decode_candidates(self, r: LayoutRequest, shape, sizes, mtp: int) -> list[Candidate]:
        found: dict[tuple, Candidate] = {}
        for target in DECODE_TPOT_TARGETS_S:
            cands, _ = pool_candidates(r.model, r.hardware, shape, target, sizes, self.grid,
                                       r.precision, r.kv_precision, mtp)
            for c in cands:
                found.setdefault((c.gpus, c.pp, c.tp, c.ep), c)
        pools = [PoolLayout("decode", 1, c.pp, c.tp, c.ep) for c in found.values()]
        kept = rank_layouts(r, pools, MAX_DECODE_LAYOUTS, decode_only=True)
        return [found[(p.worker_gpus, p.pp, p.tp, p.ep)] for p in kept]

    def _prefill_candidates(self, r: LayoutRequest, shape, sizes) -> list[Candidate]:
        best: dict[int, Candidate] = {}
        for target in PREFILL_TTFT_TARGETS_S:
            cands, _ = pool_candidates(r.model, r.hardware, shape, target, sizes, self.grid,
                                       r.precision, r.kv_precision)
            for c in cands:
                if c.gpus not in best or c.gpu_s_per_call < best[c.gpus].gpu_s_per_call:
                    best[c.gpus] = c
        # The smallest sizes each doing less work per call than every smaller one (the
        # planner's rule: a bigger, slower worker only coarsens the pool).
        kept: list[Candidate] = []
        for c in sorted(best.values(), key=lambda c: c.gpus):
            if not kept or c.gpu_s_per_call < min(k.gpu_s_per_call for k in kept):
                kept.append(c)
        return kept[:MAX_PREFILL_SIZES]


def _swept_size(g: int, hw: HardwareSpec) -> bool:
    """Worker sizes the sweeps try: powers of two, and widths that tile the scale-up
    domain in multiples of 4 (12, 24, 36, 72 on NVL72), as the planner's grid."""
    domain = hw.scale_up_domain_gpus
    return g & (g - 1) == 0 or (g % 4 == 0 and domain % g == 0)


def _stage_shapes(model: ModelSpec, g: int) -> list[tuple[int, int]]:
    """(tp, ep) of a g-GPU stage: TP alone (dense), TP attention with EP experts, and DP
    attention with EP experts (MoE)."""
    if model.moe is None:
        return [(g, 1)]
    return list(dict.fromkeys([(g, g), (1, g)]))


def _runs(r: LayoutRequest, pool: PoolLayout) -> bool:
    """The worker's weights fit and its KV holds one sequence of the longest call on
    every attention rank."""
    layout = Layout(pp=pool.pp, tp=pool.tp, ep=pool.ep, weights=r.precision, kv=r.kv_precision)
    try:
        check_layout(r.model, r.hardware, layout)
    except CostModelError:
        return False
    longest = float(np.max(r.inputs + r.outputs))
    cap = kv_capacity(r.model, r.hardware, layout)
    return cap.sequences_at(longest) >= cap.ranks
