"""Which fill pool a call's work belongs to: midfill or prefill.

The source essay (docs/sources.md) defines midfill as a long cached prefix (10k-100k+
tokens) with a short suffix (50-5,000 tokens): reading the prefix's KV dominates, and the
pool's layout is chosen for that. A call with more new tokens than cached ones is
compute-bound prefill work whatever prefix it shares: an agent session's first call
shares only the tool definitions every session caches (~12k tokens of the development
traces) and brings ~150k new ones. Engines decide on the same figure: NVIDIA Dynamo's
conditional disaggregation routes on a request's effective input length, its tokens less
its prefix cache hit
(https://docs.nvidia.com/dynamo/latest/advanced-customizations/conditional-disaggregation).

The router (`orchestrator.control.router`) sends each call by this rule, and the planner
(`costmodel.plan_values.WorkloadStats.shapes`) sizes the pools by it: one rule, written
once for a call's integers and for a trace's arrays.
"""

from __future__ import annotations

# A cached prefix at least this long makes a call midfill work, when its new tokens are
# no more than the prefix.
MIDFILL_MIN_PREFIX_TOKENS = 4096


def is_midfill(prefix_tokens, new_tokens, min_prefix_tokens=MIDFILL_MIN_PREFIX_TOKENS):
    """Whether a call with `prefix_tokens` cached and `new_tokens` to compute is midfill
    work: a prefix of at least `min_prefix_tokens`, and no more new tokens than cached.
    Integers give a bool; numpy arrays give a boolean array, element by element."""
    return (prefix_tokens >= min_prefix_tokens) & (new_tokens <= prefix_tokens)
