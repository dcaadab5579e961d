"""What the orchestrator expects of the service: its own model, corrected by what it sees.

A real orchestrator does not know the plant's exact step costs or the calls it has not
seen yet. `Predictor` prices steps with its own copy of the cost core under its own
efficiency settings (`PredictorSettings.efficiency`: a roofline at rule-of-thumb
efficiencies, without the plant's fitted overheads), scaled by `error` (a deliberate
bias, `--predictor-error`), and learns online from calls as they complete:

- the typical call (input, newly computed and output tokens) is the running mean of
  completed calls (a prior until the first completes, then an EWMA of weight `learn`);
- two correction factors, one for fills and one for decode, follow the ratio of what a
  completed call took (its fill time; its inter-token latency at the batch its worker
  was running) to what the model predicted for it (EWMA of weight `learn`).

Nothing here reads the trace, the plant's pricers or the workers: the shell
(orchestrator.run) hands it facts, the completed calls' figures (`CompletedCall`) and
the serving workers' pools and batch targets (`Worker`), and prices steps for it through
`StepQuotes` (orchestrator.run.quotes, the cost core at the prior efficiencies).
`learn=0` keeps the prior and the bias for the whole run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Protocol

from costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency

# A roofline at the efficiencies an operator assumes before measuring (50% of peak
# FLOP/s, 70% of HBM and network bandwidth, perfectly balanced experts, no per-kernel
# or per-step overheads): not the plant's fitted factors (costmodel/efficiency.py).
PRIOR_EFFICIENCY = replace(
    DEFAULT_EFFICIENCY, compute=0.50, hbm=0.70, scale_up=0.70, scale_out=0.70,
    ep_imbalance=1.0, kernel_launch_s=0.0, tp_collective_s=0.0, a2a_scale_up_s=0.0,
    a2a_scale_out_s=0.0, pp_hop_s=0.0, step_overhead_s=0.0)


@dataclass(frozen=True)
class PredictorSettings:
    error: float = 1.0  # multiplies every step time the model predicts
    learn: float = 0.02  # EWMA weight of each completed call (0: never learn)
    efficiency: Efficiency = field(default=PRIOR_EFFICIENCY)
    # The typical call before any has completed: an agent turn of a long session.
    prior_input_tokens: float = 32_768.0
    prior_new_tokens: float = 2_048.0
    prior_output_tokens: float = 512.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.error) and self.error > 0):
            raise ValueError(f"predictor error must be a finite number > 0, got {self.error!r}")
        if not (math.isfinite(self.learn) and 0 <= self.learn <= 1):
            raise ValueError(f"predictor learning weight must be in [0, 1], got {self.learn!r}")


class StepQuotes(Protocol):
    """The predictor's step prices, by pool (its own model: `PredictorSettings.efficiency`,
    not the plant's). A pool's fills are priced at its phase (prefill or midfill)."""

    def fill_s(self, pool: str, new_tokens: float, cached_tokens: float) -> float:
        """One fill of `new_tokens` after `cached_tokens` in `pool`."""
        ...

    def decode_step_s(self, pool: str, sequences: int, context_tokens: float) -> float:
        """One decode step of `sequences` at a mean context of `context_tokens` in `pool`."""
        ...


class Worker(Protocol):
    """What the predictor reads of a serving worker (a worker's state is one)."""

    @property
    def pool(self) -> str: ...

    @property
    def accepting(self) -> bool: ...

    @property
    def target_batch(self) -> int: ...


@dataclass(frozen=True)
class CompletedCall:
    """A completed call's figures, as the predictor learns from them."""

    input_tokens: int
    computed_tokens: int  # newly computed in its fill
    output_tokens: int
    fill_s: float  # its fill's time
    fill_pool: str | None  # the fill worker's pool (None: not filled by a fill worker)
    itl_s: float | None  # its mean inter-token latency (None: no decode step)
    decode_pool: str | None  # the decode worker's pool (None: no decode)
    decode_sequences: int  # sequences its decode worker ran as it ended, itself included


class Predictor:
    """Service rates for what the cluster runs now: decode calls per second at the
    workers' target batches, and the latency of a typical fill. Step prices are rounded
    shapes (new tokens to 100, context and cached tokens to 1,000), so that the shell
    prices a few shapes (`StepQuotes`) rather than one per completion."""

    def __init__(self, quotes: StepQuotes, settings: PredictorSettings | None = None) -> None:
        self.settings = settings = settings or PredictorSettings()
        self.quotes = quotes
        self.input_tokens = settings.prior_input_tokens
        self.new_tokens = settings.prior_new_tokens
        self.output_tokens = settings.prior_output_tokens
        self.completions = 0
        self.fill_correction = 1.0
        self.decode_correction = 1.0

    def _fill_s(self, pool: str, new_tokens: float, cached: float) -> float:
        """A fill of `new_tokens` (to 100 tokens) after `cached` (to 1,000) in `pool`."""
        return self.quotes.fill_s(pool, round(new_tokens, -2) or 1, round(cached, -3)) * (
            self.settings.error)

    def _tpot_s(self, pool: str, sequences: int, context: float) -> float:
        """A decode step of `sequences` at `context` tokens (to 1,000) in `pool`."""
        return self.quotes.decode_step_s(pool, max(sequences, 1), round(context, -3)) * (
            self.settings.error)

    def observe_completion(self, call: CompletedCall) -> None:
        """Learn from a completed call: its shape, and its fill and decode times against
        what the model predicted for it."""
        self.completions += 1
        learn = self.settings.learn
        if learn == 0.0:
            return
        shape_weight = max(learn, 1.0 / self.completions)  # the prior goes at once
        self.input_tokens += shape_weight * (call.input_tokens - self.input_tokens)
        self.new_tokens += shape_weight * (max(call.computed_tokens, 1) - self.new_tokens)
        self.output_tokens += shape_weight * (max(call.output_tokens, 1) - self.output_tokens)
        computed = call.computed_tokens
        if call.fill_pool is not None and call.fill_s > 0 and computed > 0:
            model = self._fill_s(call.fill_pool, computed,
                                 max(call.input_tokens - computed, 0))
            self.fill_correction += learn * (call.fill_s / model - self.fill_correction)
        itl_s = call.itl_s
        if call.decode_pool is not None and itl_s is not None and itl_s > 0:
            context = call.input_tokens + call.output_tokens / 2
            model = self._tpot_s(call.decode_pool, call.decode_sequences, context)
            self.decode_correction += learn * (itl_s / model - self.decode_correction)

    def decode_calls_per_s(self, decode_workers: Iterable[Worker]) -> float:
        """Decode calls a second over the accepting workers, each at its target batch."""
        context = self.input_tokens + self.output_tokens / 2
        total = 0.0
        for w in decode_workers:
            if w.accepting:
                tpot = self._tpot_s(w.pool, w.target_batch, context)
                total += w.target_batch / (tpot * self.decode_correction * self.output_tokens)
        return total

    def fill_latency_s(self, fill_workers: Iterable[Worker]) -> float:
        """The slowest pool's typical fill, over the pools of the fill workers."""
        cached = max(self.input_tokens - self.new_tokens, 0.0)
        worst = 0.0
        for pool in dict.fromkeys(w.pool for w in fill_workers):
            worst = max(worst, self._fill_s(pool, self.new_tokens, cached))
        return worst * self.fill_correction
