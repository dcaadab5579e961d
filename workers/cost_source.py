"""What a worker asks of the cost model: one interface, whatever prices it.

A worker (fill, decode, mixed) and the run's quotes hold a `CostSource` and ask it
the time of their next step, of a run of decode steps, of a heterogeneous batch
step, and the KV bytes a sequence holds. `workers.pricing.StepPricer` is the
roofline behind it (`costmodel/terms.py`'s term functions, through
`workers.fast_pricing`); measured kernel tables (`costmodel/measured/`) are to be a
second implementation of the same interface. `tests/unit/test_cost_source.py`
checks that the workers use nothing else of their pricer.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from costmodel.configs import Phase
from costmodel.efficiency import Efficiency


@runtime_checkable
class CostSource(Protocol):
    """A worker's prices. Times in seconds; `sequences` over the whole worker (the
    source spreads them over its attention ranks)."""

    attention_ranks: int  # data-parallel attention ranks of one instance
    eff: Efficiency  # the efficiency figures (MTP acceptance is drawn from them)

    def fill_s(self, phase: Phase, sequences: int, mean_new_tokens: float,
               mean_cached_tokens: float) -> tuple[float, float]:
        """(latency, occupancy) of one fill batch."""
        ...

    def fill_once_s(self, phase: Phase, sequences: int, mean_new_tokens: float,
                    mean_cached_tokens: float) -> float:
        """`fill_s(...)[0]`, for a caller that keeps its own memo."""
        ...

    def fill_step_s(self, new_tokens, cached_tokens, decoding=False) -> tuple[float, float]:
        """(latency, occupancy) of one step of a heterogeneous batch, request by request."""
        ...

    def mixed_step_s(self, chunk_tokens: list[int], chunk_cached: list[int],
                     decode_contexts: list[int]) -> tuple[float, float]:
        """(latency, occupancy) of prefill chunks then decodes in one step."""
        ...

    def recompute_s(self, tokens: int) -> float:
        """Recomputing a prefix from text: a prefill of that many tokens, alone."""
        ...

    def decode_steps_s(self, sequences: int, mean_context: float, steps: int) -> np.ndarray:
        """Time per output token of each of `steps` decode steps from `mean_context`."""
        ...

    def decode_run_ends_s(self, start_s: float, sequences: int, mean_context: float,
                          steps: int) -> list[float] | np.ndarray:
        """When each step of a decode run starting at `start_s` ends."""
        ...

    def decode_step_times_s(self, sequences: int, mean_contexts) -> np.ndarray:
        """Times of decode steps whose sequences start at `mean_contexts`."""
        ...

    def kv_bytes(self, tokens: float) -> float:
        """KV and state bytes one sequence of `tokens` holds."""
        ...
