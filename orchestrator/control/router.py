"""The router: which fill worker takes a call.

A call goes to a mixed worker when the cluster has them (an aggregated pool fills
and decodes each call where it lands). Otherwise a call whose cached prefix is long
and whose new tokens are no more than it goes to midfill (when there is a midfill
pool), else to prefill (`costmodel.fill_phase.is_midfill`: a session's first call
shares a cached prefix of tool definitions but is prefill work). Within the pool,
workers whose node already holds the prefix in host memory come first, then the one
with the least queued work; names break ties so routing is deterministic.

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

from costmodel.fill_phase import is_midfill
from costmodel.moved_names import moved_names

# The threshold moved to costmodel.fill_phase with the rule it belongs to (7dcbb5f).
__getattr__ = moved_names(__name__, {"MIDFILL_MIN_PREFIX_TOKENS": "costmodel.fill_phase"})

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
                       prefix_nodes: frozenset[str], new_tokens: int = 0) -> str | None:
    """The worker for a call with `prefix_tokens` cached on `prefix_nodes` and
    `new_tokens` to compute; None when no worker accepts work."""
    want = "midfill" if is_midfill(prefix_tokens, new_tokens) else "prefill"
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
    """The router's interface: which fill worker takes a call, or None to hold it. A
    router whose `choose` names a `new_tokens` parameter is also told the call's tokens
    less its cached prefix (`new_tokens=`); a `choose` of the three arguments alone is
    called with those, as before the parameter existed."""

    name: str

    def choose(self, prefix_tokens: int, candidates: list[FillCandidate],
               prefix_nodes: frozenset[str], new_tokens: int = 0) -> str | None: ...


class PrefixAffinityRouter:
    """The built-in router (registered as `prefix-affinity`): `choose_fill_worker`."""

    name = "prefix-affinity"

    def __init__(self, config=None) -> None:
        pass

    def choose(self, prefix_tokens: int, candidates: list[FillCandidate],
               prefix_nodes: frozenset[str], new_tokens: int = 0) -> str | None:
        return choose_fill_worker(prefix_tokens, candidates, prefix_nodes, new_tokens)
