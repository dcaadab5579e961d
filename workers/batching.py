"""Batch policies: pure functions from waiting work and worker state to the next step.

Fills (prefill and midfill) take a FIFO token budget per step, long prompts in
chunks: the cost core prices each request's attention and the distinct experts
the step's tokens touch, as a batch sorted by expert loads each once. Decode is
continuous batching towards a small target batch under a KV memory limit
(the source essay, docs/sources.md: decode's best batch is often 1-5).

`BatchPolicySpec.max_batch_sequences` counts per step and worker for fills; for decode
and mixed workers it caps the sequences each attention rank holds (docs/cluster-format.md),
which the worker applies to its whole batch (`DecodeWorker.max_sequences`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from workers.cluster import BatchPolicySpec
from workers.request import Request


@dataclass(frozen=True)
class FillChunk:
    """Part of one request's fill in one step: `tokens` computed over `cached_tokens`
    already in HBM (its cached prefix plus its earlier chunks)."""

    request: Request
    tokens: int
    cached_tokens: int
    last: bool  # the request's fill ends with this chunk


def fill_tokens(req: Request) -> int:
    """Tokens a request's fill computes (at least one: the last prompt token's logits)."""
    return max(1, req.input_tokens - req.prefix_tokens)


def plan_fill_batch(waiting: Sequence[Request], policy: BatchPolicySpec,
                    planned_tokens: Mapping[int, int] | None = None,
                    budget_tokens: int | None = None, ranks: int = 1) -> list[FillChunk]:
    """Chunked prefill (Sarathi-Serve, https://arxiv.org/abs/2403.02310; vLLM's and
    SGLang's chunked prefill): oldest first, each request takes what it still needs up
    to the step's token budget, within the sequence limit. A prompt longer than the
    budget is split over several steps. `planned_tokens`: tokens of each request already
    put in earlier steps; `budget_tokens`: the step's budget when not the policy's
    (a mixed step leaves room for its decodes). `ranks`: attention data-parallel ranks;
    chunk k runs on rank k mod `ranks`, within its share `budget // ranks` (SGLang
    divides `chunked_prefill_size` by `dp_size` with DP attention)."""
    planned = planned_tokens or {}
    budget = policy.max_batch_tokens if budget_tokens is None else budget_tokens
    rank_budget = [budget // ranks] * ranks if ranks > 1 else None
    chunks: list[FillChunk] = []
    for req in waiting:
        if budget <= 0 or len(chunks) >= policy.max_batch_sequences:
            break
        rank = len(chunks) % ranks
        if rank_budget is not None and rank_budget[rank] <= 0:
            break
        chunk = next_fill_chunk(req, planned, budget if rank_budget is None
                                else rank_budget[rank])
        if chunk is not None:
            chunks.append(chunk)
            budget -= chunk.tokens
            if rank_budget is not None:
                rank_budget[rank] -= chunk.tokens
    return chunks


def next_fill_chunk(req: Request, planned: Mapping[int, int], budget: int) -> FillChunk | None:
    """`req`'s chunk in a step with `budget` tokens left (> 0), or None when its fill has
    no token left to plan: `plan_fill_batch`'s step for one request, so that a plan
    grown a request at a time need not be planned again from its start."""
    done = planned.get(req.call_id, 0)
    need = fill_tokens(req) - done
    if need <= 0:
        return None
    take = min(need, budget)
    return FillChunk(req, take, req.prefix_tokens + done, take == need)


def plan_decode_admission(
    running: int,
    kv_used_bytes: float,
    ready: Sequence[Request],
    target_batch: int,
    kv_capacity_bytes: float,
    kv_bytes: Callable[[Request], float],
) -> list[Request]:
    """Which ready requests join the decode batch now: up to `target_batch` sequences in
    all (the worker's target, which it holds within its `max_batch_sequences` cap),
    oldest first, and only while `kv_bytes(req)` fits beside `kv_used_bytes` (the decode
    worker passes each sequence's KV now plus a growth reserve, never its true output
    length: `workers.kv_budget`). The first request of an empty batch always joins."""
    joined: list[Request] = []
    used = kv_used_bytes
    for req in ready:
        if running + len(joined) >= target_batch:
            break
        need = kv_bytes(req)
        if used + need > kv_capacity_bytes and (running or joined):
            break
        joined.append(req)
        used += need
    return joined
