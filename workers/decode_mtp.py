"""A decode run with multi-token prediction: each step yields a drawn number of tokens
per sequence (`costmodel.mtp.draw_tokens_per_step`: 1 plus the drafts accepted before
the first rejection), so the run's length is found from the draws, in array form.

A run ends at the first of: a sequence reaching its output length (the plant's
end of sequence), its KV overflowing the instance, or the ready buffer's head
becoming admissible as the growth reserve decays, exactly as in the one-token case
(`workers.kv_budget`), with each sequence's context grown by its own draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.capacity import KVCapacity
from workers.kv_budget import RESERVE_TOKENS, GrowthReserve, footprints

# Steps drawn ahead per run: bounds the draw matrix (steps x sequences); a longer run
# is simply continued by the next one.
MTP_HORIZON_STEPS = 256


@dataclass(frozen=True)
class MtpRun:
    steps: int  # steps to run (0: the first step overflows KV)
    gained: np.ndarray  # (steps, n): tokens each sequence holds more after each step
    mean_contexts: np.ndarray  # (steps,): mean context at the start of each step


def plan_mtp_run(kv: KVCapacity, reserve: GrowthReserve, tokens: np.ndarray,
                 contexts: np.ndarray, remaining: np.ndarray, other_bytes: float,
                 admit: tuple[np.ndarray, float] | None = None) -> MtpRun:
    """`tokens`: (horizon, n) drawn tokens per step and sequence; `contexts`, `remaining`:
    (n,); `other_bytes`: KV of sequences loading; `admit`: (contexts of the sequences
    loading, context of the ready buffer's head) when a held-back call waits."""
    c = np.asarray(contexts, dtype=np.float64)
    gained = np.cumsum(tokens, axis=0, dtype=np.float64)  # (H, n)
    horizon = len(gained)
    finished = gained >= np.asarray(remaining, dtype=np.float64)[None, :]
    done_at = np.where(finished.any(axis=0), finished.argmax(axis=0) + 1, horizon)
    steps = int(min(horizon, done_at.min()))
    grown = c[None, :] + gained  # contexts after each step
    totals = other_bytes + footprints(kv, grown).sum(axis=1)
    over = np.flatnonzero(totals > kv.instance_bytes)
    if len(over) and len(c) > 1:  # a lone sequence runs even over capacity
        steps = min(steps, int(over[0]))
    if admit is not None and steps > 1:
        waiting, head = admit
        k = np.arange(1, horizon + 1, dtype=np.float64)
        r = reserve.ratio_after(k) * RESERVE_TOKENS
        held = footprints(kv, grown + r[:, None]).sum(axis=1)
        others = np.concatenate((np.asarray(waiting, dtype=np.float64), [head]))
        held += footprints(kv, others[None, :] + r[:, None]).sum(axis=1)
        ok = np.flatnonzero(held <= kv.instance_bytes)
        if len(ok):
            steps = min(steps, int(ok[0]) + 1)
    before = np.vstack((np.zeros((1, len(c))), gained[:max(steps - 1, 0)]))
    mean_contexts = (c[None, :] + before).mean(axis=1)[:steps]
    return MtpRun(steps, gained[:steps], mean_contexts)
