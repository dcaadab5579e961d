"""Batch policies: pure functions from waiting work and worker state to the next step.

Fills (prefill and midfill) take a FIFO token batch: the cost core prices the
distinct experts such a batch touches, as a batch sorted by expert loads each
once. Decode is continuous batching towards a small target batch under a KV
memory limit (BRIEF.md section 5: decode's best batch is often 1-5).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from workers.cluster import BatchPolicySpec
from workers.request import Request


def plan_fill_batch(waiting: Sequence[Request], policy: BatchPolicySpec) -> list[Request]:
    """Oldest first, while the batch stays within the token and sequence limits.
    A single request larger than the token limit runs alone (chunking it would not
    change its price in this model, only its latency)."""
    batch: list[Request] = []
    tokens = 0
    for req in waiting:
        need = max(1, req.input_tokens - req.prefix_tokens)
        if batch and (tokens + need > policy.max_batch_tokens
                      or len(batch) >= policy.max_batch_sequences):
            break
        batch.append(req)
        tokens += need
    return batch


def plan_decode_admission(
    running: int,
    kv_used_bytes: float,
    ready: Sequence[Request],
    policy: BatchPolicySpec,
    kv_capacity_bytes: float,
    kv_bytes: Callable[[Request], float],
    target_batch: int | None = None,
) -> list[Request]:
    """Which ready requests join the decode batch now: up to the target batch, and only
    while their KV (at full length) fits beside what the batch holds. `target_batch`
    overrides the pool's default (a controller may set it)."""
    target = min(policy.target_batch if target_batch is None else target_batch,
                 policy.max_batch_sequences)
    joined: list[Request] = []
    used = kv_used_bytes
    for req in ready:
        if running + len(joined) >= target:
            break
        need = kv_bytes(req)
        if used + need > kv_capacity_bytes and (running or joined):
            break
        joined.append(req)
        used += need
    return joined
