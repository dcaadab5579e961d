"""The predictor's step prices, from the cost core: the shell's side of
`orchestrator.control.predictor.StepQuotes`.

Each pool is priced by its own `StepPricer` (its model, hardware and layout, as the pool
was built) at the predictor's efficiency settings, not the plant's; a pool's fills at its
phase (a midfill pool's as midfills, any other's as prefills).
"""

from __future__ import annotations

from costmodel.efficiency import Efficiency
from costmodel.phase import Phase
from workers.cluster import BoundCluster
from workers.cost_source import CostSource
from workers.pricing import StepPricer


class PoolQuotes:
    """Step prices by pool, memoised by shape. The memo is here, at the shell's boundary,
    because it pays: the predictor asks for the same few rounded shapes at nearly every
    sample and completion, and one price through the cost core takes tens of
    microseconds (a replay's profile: most of the predictor's time without it)."""

    def __init__(self, cluster: BoundCluster, efficiency: Efficiency) -> None:
        self._pricers: dict[str, CostSource] = {}
        self._phases: dict[str, Phase] = {}
        for w in cluster.workers:  # one model per pool, as the pool was built
            if w.pool not in self._pricers:
                self._pricers[w.pool] = StepPricer(cluster.model, w.hardware, w.layout,
                                                   efficiency)
                self._phases[w.pool] = Phase.MIDFILL if w.phase is Phase.MIDFILL else (
                    Phase.PREFILL)
        self._fills: dict[tuple, float] = {}
        self._steps: dict[tuple, float] = {}

    def fill_s(self, pool: str, new_tokens: float, cached_tokens: float) -> float:
        key = (pool, new_tokens, cached_tokens)
        value = self._fills.get(key)
        if value is None:
            value = self._fills[key] = float(self._pricers[pool].fill_once_s(
                self._phases[pool], 1, new_tokens, cached_tokens))
        return value

    def decode_step_s(self, pool: str, sequences: int, context_tokens: float) -> float:
        key = (pool, sequences, context_tokens)
        value = self._steps.get(key)
        if value is None:
            value = self._steps[key] = float(self._pricers[pool].decode_steps_s(
                sequences, context_tokens, 1)[0])
        return value
