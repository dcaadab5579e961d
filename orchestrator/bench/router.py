"""How a benchmark's calls reach data-parallel replicas: to the one with fewest in flight.

A benchmark's aggregated layouts are replicas of one mixed worker behind one endpoint.
The built-in router weighs a worker by its queued prompt tokens only, which for a mixed
worker leaves out the calls it is decoding: with every queue empty, ties go by name and
one replica takes every call while the others idle. An engine's own front end balances
by calls in flight instead (vLLM's internal data-parallel load balancing "is based on the
running and waiting queues in each of the engines",
https://github.com/vllm-project/vllm/blob/main/docs/serving/data_parallel_deployment.md),
and so does this router: a call goes
to the mixed worker with the fewest calls routed to it and not yet done, ties to the
fewer queued tokens, then the name. Calls for fill workers (a disaggregated layout's
prefill pool) are routed by the built-in rule: their queue is their load. A run
listener as well (`on_done`), it counts a call out when it completes.
"""

from __future__ import annotations

from orchestrator.control.router import FillCandidate, choose_fill_worker


class BalancedRouter:
    name = "balanced"

    def __init__(self) -> None:
        self.in_flight: dict[str, int] = {}

    def choose(self, prefix_tokens: int, candidates: list[FillCandidate],
               prefix_nodes: frozenset[str], new_tokens: int = 0) -> str | None:
        mixed = [c for c in candidates if c.accepting and c.phase == "mixed"]
        if not mixed:
            return choose_fill_worker(prefix_tokens, candidates, prefix_nodes, new_tokens)
        counts = self.in_flight
        best = min(mixed, key=lambda c: (counts.get(c.name, 0), c.queued_tokens, c.name))
        counts[best.name] = counts.get(best.name, 0) + 1
        return best.name

    def on_done(self, _orch, req, _now_s: float) -> None:
        worker = req.fill_worker
        if worker in self.in_flight:
            self.in_flight[worker] -= 1
