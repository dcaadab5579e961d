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

Nothing here reads the trace or the plant's pricers. `learn=0` keeps the prior and the
bias for the whole run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from costmodel.phase import Phase
from workers.cluster import BoundCluster
from workers.pricing import StepPricer
from workers.request import LatencyPart, Request
from workers.runtime import ClusterRuntime

# A roofline at the efficiencies an operator assumes before measuring (50% of peak
# FLOP/s, 70% of HBM and network bandwidth, perfectly balanced experts, no per-kernel
# or per-step overheads): not the plant's fitted factors (costmodel/efficiency.py).
PRIOR_EFFICIENCY = replace(
    DEFAULT_EFFICIENCY, compute=0.50, hbm=0.70, scale_up=0.70, scale_out=0.70,
    ep_imbalance=1.0, kernel_launch_s=0.0, tp_collective_s=0.0, a2a_scale_up_s=0.0,
    a2a_scale_out_s=0.0, pp_hop_s=0.0, step_overhead_s=0.0)
_FILL = LatencyPart.FILL  # read per completed call (a member off its class is slower)


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


class Predictor:
    """Service rates for what the cluster runs now: decode calls per second at the
    workers' target batches, and the latency of a typical fill."""

    def __init__(self, cluster: BoundCluster, settings: PredictorSettings | None = None) -> None:
        self.settings = settings = settings or PredictorSettings()
        self.input_tokens = settings.prior_input_tokens
        self.new_tokens = settings.prior_new_tokens
        self.output_tokens = settings.prior_output_tokens
        self.completions = 0
        self.fill_correction = 1.0
        self.decode_correction = 1.0
        self._pricers: dict[str, StepPricer] = {}
        for w in cluster.workers:  # one model per pool, as the pool was built
            if w.pool not in self._pricers:
                self._pricers[w.pool] = StepPricer(cluster.model, w.hardware, w.layout,
                                                   settings.efficiency)
        self._cache: dict[tuple, float] = {}
        self._rates: tuple[tuple, float] | None = None  # (what it depends on, value)
        self._fill: tuple[tuple, float] | None = None
        # What the two predictions are made of and that a completion rarely moves (their
        # corrections and output length move at every one): the typical call's rounded
        # shape, the fill pools' worst fill, each decode worker's step time.
        self._new_rounded = Rounding(-2)
        self._cached_rounded = Rounding(-3)
        self._context_rounded = Rounding(-3)
        self._fill_model: tuple[tuple, float] | None = None  # (pools and shape, worst fill)
        self._fill_pools: tuple[tuple, list] | None = None  # (pools, each pool and phase)
        self._tpots: tuple[tuple, list] | None = None  # (workers and context, step times)

    def _model_fill_s(self, pool: str, phase: Phase, new_tokens: float, cached: float) -> float:
        return self._model_fill_rounded_s(pool, phase, round(new_tokens, -2), round(cached, -3))

    def _model_fill_rounded_s(self, pool: str, phase: Phase, new_tokens: float,
                              cached: float) -> float:
        """A fill of `new_tokens` (to 100 tokens) after `cached` (to 1,000), priced once."""
        key = ("fill", pool, phase, new_tokens, cached)
        value = self._cache.get(key)
        if value is None:
            value = self._cache[key] = float(self._pricers[pool].fill_once_s(
                phase, 1, new_tokens or 1, cached))
        return value * self.settings.error

    def _model_tpot_s(self, pool: str, sequences: int, context: float) -> float:
        return self._model_tpot_rounded_s(pool, sequences, round(context, -3))

    def _model_tpot_rounded_s(self, pool: str, sequences: int, context: float) -> float:
        """A decode step of `sequences` at `context` tokens (to 1,000), priced once."""
        key = ("decode", pool, max(sequences, 1), context)
        value = self._cache.get(key)
        if value is None:
            value = self._cache[key] = float(self._pricers[pool].decode_steps_s(key[2], context,
                                                                                1)[0])
        return value * self.settings.error

    def observe_completion(self, req: Request, rt: ClusterRuntime) -> None:
        """Learn from a completed call: its shape, and its fill and decode times against
        what the model predicted for it."""
        self._rates = self._fill = None
        self.completions += 1
        learn = self.settings.learn
        if learn == 0.0:
            return
        shape_weight = max(learn, 1.0 / self.completions)  # the prior goes at once
        self.input_tokens += shape_weight * (req.input_tokens - self.input_tokens)
        self.new_tokens += shape_weight * (max(req.computed_tokens, 1) - self.new_tokens)
        self.output_tokens += shape_weight * (max(req.output_tokens, 1) - self.output_tokens)
        fill_s = req.parts_s[_FILL]
        computed = req.computed_tokens
        worker = rt.fill_workers.get(req.fill_worker) if req.fill_worker else None
        if worker is not None and fill_s > 0 and computed > 0:
            spec = worker.spec
            phase = Phase.MIDFILL if spec.phase is Phase.MIDFILL else Phase.PREFILL
            cached = max(req.input_tokens - computed, 0)
            model = self._model_fill_rounded_s(spec.pool, phase, round(computed, -2),
                                               round(cached, -3))
            self.fill_correction += learn * (fill_s / model - self.fill_correction)
        dec = rt.decode_workers.get(req.decode_worker) if req.decode_worker else None
        if dec is not None:
            # The service's own time per token, without waits and stalls.
            itl_s = req.decode_s_per_token
            if itl_s is not None and itl_s > 0:
                context = req.input_tokens + req.output_tokens / 2
                model = self._model_tpot_rounded_s(dec.spec.pool, dec.sequences_running() + 1,
                                                   round(context, -3))
                self.decode_correction += learn * (itl_s / model - self.decode_correction)

    def decode_calls_per_s(self, rt: ClusterRuntime) -> float:
        key = tuple([(w.spec.pool, w.accepting, w.target_batch)
                     for w in rt.decode_workers.values()])
        if self._rates is not None and self._rates[0] == key:
            return self._rates[1]
        context = self._context_rounded.of(self.input_tokens + self.output_tokens / 2)
        tpots = self._tpots
        if tpots is None or tpots[0] != (key, context):
            # Each accepting worker's (target batch, step time at it), in the workers' order.
            tpots = self._tpots = ((key, context), [
                (w.target_batch, self._model_tpot_rounded_s(w.spec.pool, w.target_batch,
                                                            context))
                for w in rt.decode_workers.values() if w.accepting])
        total = 0.0
        for batch, tpot in tpots[1]:
            total += batch / (tpot * self.decode_correction * self.output_tokens)
        self._rates = (key, total)
        return total

    def fill_latency_s(self, rt: ClusterRuntime) -> float:
        key = tuple([w.spec.pool for w in rt.fill_workers.values()])
        if self._fill is not None and self._fill[0] == key:
            return self._fill[1]
        new_tokens = self._new_rounded.of(self.new_tokens)
        cached = self._cached_rounded.of(max(self.input_tokens - self.new_tokens, 0.0))
        model = self._fill_model
        if model is None or model[0] != (key, new_tokens, cached):
            pools = self._fill_pools
            if pools is None or pools[0] != key:
                # Workers of one pool and phase predict the same fill: one figure for them
                # all (a pool's workers share its phase).
                pools = self._fill_pools = (key, [
                    (pool, Phase.MIDFILL if phase is Phase.MIDFILL else Phase.PREFILL)
                    for pool, phase in dict.fromkeys((w.spec.pool, w.spec.phase)
                                                     for w in rt.fill_workers.values())])
            worst = 0.0
            for pool, phase in pools[1]:
                worst = max(worst, self._model_fill_rounded_s(pool, phase, new_tokens, cached))
            model = self._fill_model = ((key, new_tokens, cached), worst)
        self._fill = (key, model[1] * self.fill_correction)
        return self._fill[1]


class Rounding:
    """`round(x, digits)` of a float that moves a little at a time (an EWMA), for
    `digits` <= 0: while x stays strictly within half a unit of the last value (a
    multiple of 10 ** -digits, > 0), that value again, without rounding (~0.6 us a
    `round` of a float to tens or more); the same double `round` gives (the nearest
    multiple: no tie inside the open interval)."""

    __slots__ = ("_digits", "_half", "_hi", "_lo", "_value")

    def __init__(self, digits: int) -> None:
        self._digits, self._half = digits, 10.0 ** -digits / 2
        self._value, self._lo, self._hi = 0.0, 0.0, 0.0  # an empty interval

    def of(self, x: float) -> float:
        if self._lo < x < self._hi:
            return self._value
        value = self._value = round(x, self._digits)
        if value > 0.0:  # (a zero's sign follows x's: not kept)
            self._lo, self._hi = value - self._half, value + self._half
        else:
            self._lo = self._hi = 0.0
        return value
