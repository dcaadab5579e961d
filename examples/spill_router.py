"""A router that lets prefill work spill onto the midfill pool: tried where the prefill
worker binds (the preset since the fill split fix, docs/control.md, "The fills split as
the router should": prefill busy 0.95 of the time, the midfill pool 0.44-0.82). Use it as
`--router examples.spill_router:SpillRouter` from a checkout's root.

A call the rule makes midfill work (`costmodel.fill_phase.is_midfill`) goes to midfill
as the built-in router sends it. Any other call, prefill work, may go to a prefill or a
midfill worker: the one with the fewest queued new tokens (prefill first on a tie), as
NVIDIA Dynamo's conditional disaggregation weighs load beside a call's effective length
(https://docs.nvidia.com/dynamo/latest/advanced-customizations/conditional-disaggregation).
It is told each call's new tokens through the `new_tokens` parameter (docs/plugins.md)."""

from orchestrator.control.router import PrefixAffinityRouter, choose_fill_worker
from tokenfactory import FillCandidate, is_midfill


class SpillRouter(PrefixAffinityRouter):
    name = "spill"

    def choose(self, prefix_tokens: int, candidates: list[FillCandidate],
               prefix_nodes: frozenset[str], new_tokens: int = 0) -> str | None:
        fills = [c for c in candidates if c.accepting and c.phase in ("prefill", "midfill")]
        mixed = any(c.accepting and c.phase == "mixed" for c in candidates)
        if mixed or not fills or is_midfill(prefix_tokens, new_tokens):
            return choose_fill_worker(prefix_tokens, candidates, prefix_nodes, new_tokens)
        return min(fills, key=lambda c: (c.queued_tokens, c.phase != "prefill", c.name)).name
