"""KV capacity of one instance: how many tokens of KV (and how many sequences at a given
context) fit beside the weights, with replication across tensor-parallel ranks counted.

Attention runs tensor-parallel over `tp` GPUs and data-parallel over the stage's
`max(tp, ep) / tp` ranks. Each attention rank group (its `tp` GPUs in every stage)
holds its own sequences' KV. Inside a group, TP shards KV only by KV head: MLA's
latent is shared by all heads, so every TP rank holds all of it (one copy per GPU);
GQA splits by KV head up to the number of KV heads and replicates beyond. A pipeline
stage holds the KV of its own layers. Linear-attention state shards by head (`tp`
ways); sliding-window layers hold a window per sequence.

Units: `budget_bytes_per_gpu` is HBM per GPU; a sequence's footprint
(`sequence_bytes_per_gpu`) is what it costs on each GPU of its rank group. The
instance's capacity in those units is `ranks * budget_bytes_per_gpu`, the figure a
worker compares the sum of its sequences' footprints with (it assumes the sequences
are balanced over its ranks, as DP-attention schedulers keep them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from costmodel.hardware import HardwareSpec
from costmodel.layout import Layout
from costmodel.memory import stage_fraction, weight_bytes_per_gpu
from costmodel.model import ModelSpec
from costmodel.precision import BYTES_PER_ELEMENT

# Share of the HBM left after weights that holds KV; the rest is activations,
# all-to-all buffers, CUDA graphs and allocator fragmentation. SGLang's
# `mem_fraction_static` (0.8-0.9 of the whole HBM on large GPUs) and vLLM's
# `gpu_memory_utilization` (default 0.9) leave a similar margin.
KV_SHARE_OF_FREE_HBM = 0.85


EXACT_INTEGERS = 2**53  # every integer below it is a double


@dataclass(frozen=True)
class KVCapacity:
    """What one instance can hold. `fits` is False when the weights alone overflow HBM
    (then every capacity figure is 0)."""

    weight_bytes_per_gpu: float
    budget_bytes_per_gpu: float  # HBM per GPU left for KV and per-sequence state
    ranks: int  # attention data-parallel rank groups in the instance
    kv_bytes_per_token_per_gpu: float  # full-attention KV of one token, on each GPU
    state_bytes_per_sequence_per_gpu: float  # linear state + sliding windows, per GPU
    window_tokens: int
    _full_per_token: float  # full-layer part of the per-token figure
    _slide_per_token: float  # sliding-layer part (counts up to the window)

    @property
    def fits(self) -> bool:
        return self.budget_bytes_per_gpu > 0

    @cached_property
    def instance_bytes(self) -> float:
        """Capacity in footprint units: the sum of `sequence_bytes_per_gpu` it allows."""
        return self.ranks * self.budget_bytes_per_gpu

    @cached_property
    def footprint_terms(self) -> tuple[float, float, float, float]:
        """`sequence_bytes_per_gpu` taken apart for sums over many sequences, worked out
        once: (bytes per token of context, bytes per token up to the window, bytes per
        sequence, the window as a float). The middle two are derived from the footprints
        at 0 and 1 tokens, the doubles the decode budget's sums have always used."""
        per_token = self.kv_bytes_per_token_per_gpu
        state = self.sequence_bytes_per_gpu(0.0)
        slide = self.sequence_bytes_per_gpu(1.0) - state - per_token
        return per_token, slide, state, float(self.window_tokens)

    @cached_property
    def linear_terms(self) -> tuple[float, float] | None:
        """(bytes per token of context, bytes per sequence) when the model has no sliding
        layer: `sequence_bytes_per_gpu(c)` is then `per_token * c + state` with these very
        doubles (its sliding term adds +0.0), so a sum over many sequences can be made in
        one pass; None with sliding layers."""
        if self._slide_per_token != 0.0:
            return None
        return self._full_per_token, self.state_bytes_per_sequence_per_gpu

    @cached_property
    def integer_footprints(self) -> tuple[int, int] | None:
        """(bytes per token, bytes per sequence) as integers when a footprint is exactly
        `per_token * context + state` in whole bytes (no sliding layer, both terms
        whole numbers, at least a byte per token); else None. Then footprints of whole
        token counts add up exactly in integers while the total stays below 2**53."""
        per_token, slide, state, _ = self.footprint_terms
        if slide == 0.0 and per_token >= 1.0 and state >= 0.0 and all(
                math.isfinite(x) and x.is_integer() for x in (per_token, state)):
            return int(per_token), int(state)
        return None

    @cached_property
    def tokens_per_rank(self) -> int:
        if not self.fits:
            return 0
        if self._full_per_token <= 0:
            return 0  # no full-attention layer: capacity is in sequences only
        return int(self.budget_bytes_per_gpu // self._full_per_token)

    @cached_property
    def kv_capacity_tokens(self) -> int:
        """Tokens of full-attention KV the instance holds (per-sequence state aside)."""
        return self.ranks * self.tokens_per_rank

    def sequence_bytes_per_gpu(self, context_tokens: float) -> float:
        """One sequence of `context_tokens` on each GPU of its rank group."""
        c = float(context_tokens)
        return (self._full_per_token * c
                + self._slide_per_token * min(c, float(self.window_tokens))
                + self.state_bytes_per_sequence_per_gpu)

    def sequences_bytes_per_gpu(self, contexts: list) -> list[float]:
        """`[sequence_bytes_per_gpu(c) for c in contexts]`, the same doubles: the same
        operations in the same order, without a call per sequence (a decode plan asks
        for a batch's footprints at every step)."""
        full, slide = self._full_per_token, self._slide_per_token
        window, state = float(self.window_tokens), self.state_bytes_per_sequence_per_gpu
        # `window if window < c else c` is `min(c, window)`: min keeps the first of equals.
        return [full * c + slide * (window if window < c else c) + state
                for c in map(float, contexts)]

    def sequences_bytes_sum(self, contexts: list) -> float:
        """`sum(self.sequences_bytes_per_gpu(contexts))`, the same number. Whole token
        counts and whole-byte terms (`integer_footprints`) make every footprint and
        every partial sum an integer below 2**53 while the total is: each float
        addition is exact, and the sum is the integer total."""
        exact = self.integer_footprints
        if exact is not None and contexts:
            tokens = sum(contexts)
            if type(tokens) is int and min(contexts) >= 0:
                total = exact[0] * tokens + exact[1] * len(contexts)
                if total < EXACT_INTEGERS:
                    return float(total)
        return sum(self.sequences_bytes_per_gpu(contexts))

    def sequences_at(self, context_tokens: float) -> int:
        """How many sequences of `context_tokens` the instance holds at once."""
        if not self.fits:
            return 0
        per = self.sequence_bytes_per_gpu(context_tokens)
        return self.ranks * int(self.budget_bytes_per_gpu // per) if per > 0 else 0


def kv_capacity(model: ModelSpec, hw: HardwareSpec, layout: Layout,
                weight_bytes: float | None = None,
                share: float = KV_SHARE_OF_FREE_HBM) -> KVCapacity:
    """Capacity of one instance of `layout` on `hw`. `weight_bytes` overrides the weights
    per GPU (an attention instance whose experts live elsewhere holds fewer)."""
    weights = float(weight_bytes_per_gpu(model, layout) if weight_bytes is None
                    else weight_bytes)
    budget = max(0.0, share * (hw.hbm_bytes - weights))
    f = float(stage_fraction(model, layout.pp))
    kvb = BYTES_PER_ELEMENT[layout.kv]
    split = model.kv_tp_split(layout.tp)
    per_layer = model.kv_elems_per_token_layer * kvb / split
    state = model.state_bytes_per_sequence(kvb) - (
        model.n_sliding_layers * model.sliding_window * model.kv_elems_per_token_layer * kvb)
    return KVCapacity(
        weight_bytes_per_gpu=weights,
        budget_bytes_per_gpu=budget,
        ranks=layout.stage_gpus // layout.tp,
        kv_bytes_per_token_per_gpu=f * model.n_full_layers * per_layer,
        state_bytes_per_sequence_per_gpu=f * max(state, 0.0) / layout.tp,
        window_tokens=max(model.sliding_window, 1),
        _full_per_token=f * model.n_full_layers * per_layer,
        _slide_per_token=f * model.n_sliding_layers * per_layer,
    )


def kv_capacity_tokens_array(model: ModelSpec, hbm_bytes, pp, tp, ep, precision,
                             kv_bytes_per_elem: float = 2.0,
                             share: float = KV_SHARE_OF_FREE_HBM):
    """`kv_capacity(...).kv_capacity_tokens` over arrays of layouts (sweeps, the planner)."""
    pp, tp, ep = (np.asarray(x, dtype=np.float64) for x in (pp, tp, ep))
    weights = weight_bytes_per_gpu(model, pp=pp, tp=tp, ep=ep, precision=precision)
    budget = np.maximum(0.0, share * (np.asarray(hbm_bytes, dtype=np.float64) - weights))
    f = stage_fraction(model, pp)
    # MLA: one latent that every TP rank holds whole; GQA: split by KV head.
    split = np.ones_like(tp) if model.attention == 0 else np.minimum(tp, model.gqa.kv_heads)
    per_token = f * model.n_full_layers * model.kv_elems_per_token_layer * kv_bytes_per_elem / split
    ranks = np.maximum(tp, ep) // tp
    with np.errstate(divide="ignore", invalid="ignore"):
        per_rank = np.where(per_token > 0, np.floor(budget / per_token), 0.0)
    return ranks * per_rank
