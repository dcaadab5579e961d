"""The router: which fill worker takes a call.

A call goes to a mixed worker when the cluster has them (an aggregated pool fills
and decodes each call where it lands). Otherwise a call whose cached prefix is
long goes to midfill (when there is a midfill pool), else to prefill. Within the pool, workers whose node already holds
the prefix in host memory come first, then the one with the least queued work;
names break ties so routing is deterministic.

When KV stays resident in HBM (`--kv-policy retain`, workers.kv_policy), each candidate
says how many of the call's prefix tokens its HBM holds (`resident_tokens`, what a
router learns from the workers' KV events) and the worker holding the most takes the
call. Either way a worker whose queue is out of balance with the shortest one takes no
call for its cache, as SGLang's cache-aware router does
(https://docs.sglang.ai/advanced_features/router.html: cache-aware routing with
`balance_abs_threshold` and `balance_rel_threshold`); here a worker is out of balance
when it has more than `BALANCE_ABS_TOKENS` queued tokens beyond the shortest queue and
over `BALANCE_REL` times it. Without that guard on host memory, a prefix every session
shares (tool definitions) held in one node's DRAM sent every session's first call to
that node's workers while the others idled (1,152 GPUs at 10,000 sessions an hour:
one of 24 prefill workers queued 1,174 calls after 600 simulated seconds, 20 had none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

# A prefix at least this long makes a call midfill work (the source essay, docs/sources.md: midfill
# is a long cached prefix, 10k-100k+, with a short suffix).
MIDFILL_MIN_PREFIX_TOKENS = 4096
# Out of balance for prefix affinity (module docstring): about a third of one fill step
# of the planned clusters (~100k tokens) beyond the shortest queue, and 1.5 times it.
BALANCE_ABS_TOKENS = 32_768
BALANCE_REL = 1.5


@dataclass(frozen=True)
class FillCandidate:
    name: str
    phase: str  # "prefill", "midfill" or "mixed"
    node: str
    queued_tokens: int
    accepting: bool
    resident_tokens: int = 0  # of the call's prefix, in this worker's HBM


def choose_fill_worker(prefix_tokens: int, candidates: list[FillCandidate],
                       prefix_nodes: frozenset[str]) -> str | None:
    """The worker for a call with `prefix_tokens` cached on `prefix_nodes`; None when no
    worker accepts work."""
    want = "midfill" if prefix_tokens >= MIDFILL_MIN_PREFIX_TOKENS else "prefill"
    # The accepting workers, and of them the mixed ones and those of the wanted phase, in
    # one pass (in the candidates' order).
    open_: list[FillCandidate] = []
    mixed: list[FillCandidate] = []
    wanted: list[FillCandidate] = []
    resident = False
    for c in candidates:
        if c.accepting:
            open_.append(c)
            phase = c.phase
            if phase == "mixed":
                mixed.append(c)
            elif phase == want:
                wanted.append(c)
            if c.resident_tokens:
                resident = True
    if not open_:
        return None
    pool = mixed or wanted or open_
    residency = resident and any(c.resident_tokens for c in pool)
    if residency or prefix_nodes:  # a cache to follow, within the balanced workers
        least = min(c.queued_tokens for c in pool)
        pool = [c for c in pool if c.queued_tokens - least <= BALANCE_ABS_TOKENS
                or c.queued_tokens <= BALANCE_REL * least]
    if residency:
        best = min(pool, key=lambda c: (-c.resident_tokens, c.node not in prefix_nodes,
                                        c.queued_tokens, c.name))
        return best.name
    best = min(pool, key=lambda c: (c.node not in prefix_nodes, c.queued_tokens, c.name))
    return best.name


@runtime_checkable
class RoutingPolicy(Protocol):
    """The router's interface: which fill worker takes a call, or None to hold it."""

    name: str

    def choose(self, prefix_tokens: int, candidates: list[FillCandidate],
               prefix_nodes: frozenset[str]) -> str | None: ...


class PrefixAffinityRouter:
    """The built-in router (registered as `prefix-affinity`): `choose_fill_worker`."""

    name = "prefix-affinity"

    def __init__(self, config=None) -> None:
        pass

    def choose(self, prefix_tokens: int, candidates: list[FillCandidate],
               prefix_nodes: frozenset[str]) -> str | None:
        return choose_fill_worker(prefix_tokens, candidates, prefix_nodes)
