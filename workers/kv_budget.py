"""Decode's KV budget without knowing output lengths: admission headroom, how many steps
fit, and whom to preempt. Pure functions and one small state; the decode worker applies.

A real engine does not know when a sequence will stop, so its KV grows a token per
sequence per step until the sequence ends. Two public engines show the two halves:

- SGLang admits a request while the running requests' KV plus a reserve for their
  growth fits: each reserves `new_token_ratio x min(max_new_tokens - generated, 4096)`
  tokens. The ratio starts at 0.7, decays linearly to 0.7 x 0.14 over 600 decode steps,
  and is re-estimated after a retraction
  (https://github.com/sgl-project/sglang, `python/sglang/srt/managers/scheduler.py`,
  `SGLANG_INIT_NEW_TOKEN_RATIO`, `SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`,
  `SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`, `SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`).
  The traces give no `max_tokens`, so every sequence reserves the clipped 4096.
- When decode would run out, SGLang retracts requests until the batch can run 20 more
  steps (`SGLANG_RETRACT_DECODE_STEPS`); vLLM v1 preempts the most recently scheduled
  request (`self.running.pop()` in `vllm/v1/core/sched/scheduler.py`) and puts it at the
  head of the waiting queue, to be recomputed. Here: the most recently admitted go first
  (vLLM's order) until 20 steps fit (SGLang's margin), and never the last sequence.

Footprints are in `KVCapacity` units: bytes on each GPU of the sequence's attention rank
group (`sequence_bytes_per_gpu`), against `instance_bytes`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.capacity import EXACT_INTEGERS, KVCapacity
from workers.pairwise import pairwise_sum

INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
RESERVE_TOKENS = 4096  # the growth a sequence may still need, when no max_tokens is known
RETRACT_STEPS = 20  # after a preemption the batch can run this many steps again
_DECAY_PER_STEP = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / NEW_TOKEN_RATIO_DECAY_STEPS


@dataclass
class GrowthReserve:
    """SGLang's `new_token_ratio`: the share of `RESERVE_TOKENS` each held sequence keeps
    free for its growth when another is admitted."""

    ratio: float = INIT_NEW_TOKEN_RATIO

    def tokens(self) -> float:
        return self.ratio * RESERVE_TOKENS

    def decay(self, steps: int) -> None:
        # ratio_after's arithmetic on floats: one run's decay without numpy's per-call cost.
        self.ratio = max(MIN_NEW_TOKEN_RATIO, self.ratio - float(steps) * _DECAY_PER_STEP)

    def ratio_after(self, steps):
        """The ratio after `steps` more decode steps (an array of steps gives an array)."""
        return np.maximum(MIN_NEW_TOKEN_RATIO, self.ratio - np.asarray(steps) * _DECAY_PER_STEP)

    def after_preemption(self, generated: list[int]) -> None:
        """Re-estimate from the sequences left running: what they generated plus the
        retraction margin, over what they may generate in all (SGLang's estimate)."""
        if generated:
            est = (sum(generated) + RETRACT_STEPS * len(generated)) / (
                RESERVE_TOKENS * len(generated))
            self.ratio = min(1.0, max(MIN_NEW_TOKEN_RATIO, est))


def footprints(kv: KVCapacity, contexts: np.ndarray) -> np.ndarray:
    """`kv.sequence_bytes_per_gpu` over an array of contexts."""
    c = np.asarray(contexts, dtype=np.float64)
    per_token, slide, state, _ = kv.footprint_terms
    if not slide:  # no sliding layer: its term is a signed zero, which adds nothing
        return per_token * c + state
    return per_token * c + slide * np.minimum(c, kv.window_tokens) + state


# Batches of at most this many sequences sum their footprints in Python floats: numpy's
# per-call cost is most of the work there. Without sliding layers a footprint is two
# operations instead of five: Python stays cheaper up to twice as many sequences.
SCALAR_SEQUENCES = 16
SCALAR_SEQUENCES_FULL = 32


def footprints_sum(kv: KVCapacity, contexts: np.ndarray | list) -> float:
    """`float(footprints(kv, contexts).sum())`, the same double: a short batch's in Python
    floats, element by element as numpy computes them, summed in numpy's pairwise order
    (`workers.pairwise.pairwise_sum`). `contexts`: an array or a sequence of numbers."""
    exact = kv.integer_footprints
    if exact is not None and type(contexts) is list and contexts:
        # Whole token counts and whole-byte terms: every footprint, and every partial sum
        # in any order, is an integer below 2**53, so each float operation is exact and
        # numpy's double is the integer total.
        tokens = sum(contexts)
        if type(tokens) is int and min(contexts) >= 0:
            total = exact[0] * tokens + exact[1] * len(contexts)
            if total < EXACT_INTEGERS:
                return float(total)
    per_token, slide, state, window = kv.footprint_terms
    if len(contexts) > (SCALAR_SEQUENCES if slide else SCALAR_SEQUENCES_FULL):
        return float(footprints(kv, contexts).sum())
    if isinstance(contexts, np.ndarray):
        contexts = contexts.tolist()
    if not slide:  # as in `footprints`
        return pairwise_sum([per_token * c + state for c in map(float, contexts)])
    return pairwise_sum([per_token * c + slide * min(c, window) + state
                         for c in map(float, contexts)])


def steps_that_fit(kv: KVCapacity, contexts: np.ndarray | list, other_bytes: float,
                   horizon: int) -> int:
    """How many decode steps (each sequence +1 token) the batch at `contexts` (an array or
    a list) can run,
    up to `horizon`, before its KV plus `other_bytes` (sequences loading) exceeds the
    instance. In closed form: full-attention KV grows linearly; sliding-window layers
    grow until each sequence reaches the window. 0: the next step overflows."""
    room = kv.instance_bytes - other_bytes - footprints_sum(kv, contexts)
    per_token, slide, _, _ = kv.footprint_terms
    full = per_token * len(contexts)
    if room < 0:
        return 0
    left = None  # tokens until each sliding window is full
    if slide > 0:
        left = np.maximum(kv.window_tokens - np.asarray(contexts, dtype=np.float64), 0.0)
    if left is None or not left.any():
        if full <= 0:
            return horizon
        return int(min(horizon, room // full))
    # Growth after k steps: full * k + slide * sum_i min(k, left_i), increasing in k.
    k = np.arange(1, horizon + 1, dtype=np.float64)
    d = np.sort(left)
    below = np.searchsorted(d, k, side="left")  # sequences whose window fills before k
    short = np.concatenate(([0.0], np.cumsum(d)))[below]
    growth = full * k + slide * (short + k * (len(d) - below))
    return int(np.searchsorted(growth, room, side="right"))


def preemption_count(kv: KVCapacity, contexts: np.ndarray | list, other_bytes: float) -> int:
    """How many of the most recently admitted sequences (the end of `contexts`, in
    admission order) to preempt so that `RETRACT_STEPS` steps fit; the first sequence
    always stays (alone it runs even over capacity rather than never finish)."""
    n = len(contexts)
    for drop in range(n):
        if steps_that_fit(kv, contexts[:n - drop], other_bytes, RETRACT_STEPS) >= RETRACT_STEPS:
            return drop
    return n - 1


def steps_until_admissible(kv: KVCapacity, reserve: GrowthReserve, contexts: np.ndarray,
                           waiting_contexts: np.ndarray, head_context: float,
                           horizon: int) -> int:
    """The first step k in 1..horizon after which the ready buffer's head (at
    `head_context`) would be admitted beside the running sequences (at `contexts`, +k
    tokens) and those loading (`waiting_contexts`), as the reserve decays; 0: not within
    the horizon. Each held sequence and the head count their KV plus the reserve, as
    admission does. Lets a run stop exactly where a step-by-step worker would admit."""
    k = np.arange(1, horizon + 1, dtype=np.float64)
    r = reserve.ratio_after(k) * RESERVE_TOKENS  # (horizon,)
    c = np.asarray(contexts, dtype=np.float64)
    w = np.concatenate((np.asarray(waiting_contexts, dtype=np.float64), [head_context]))
    full, slide, state, win = kv.footprint_terms
    n = len(c) + len(w)
    used = full * (c.sum() + len(c) * k + w.sum() + n * r) + n * state
    if slide > 0:
        grown = np.minimum(c[:, None] + k[None, :] + r[None, :], win).sum(axis=0)
        used += slide * (grown + np.minimum(w[:, None] + r[None, :], win).sum(axis=0))
    ok = np.flatnonzero(used <= kv.instance_bytes)
    return int(ok[0]) + 1 if len(ok) else 0
