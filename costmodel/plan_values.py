"""The planner's values: the trace as it sees it (`WorkloadStats`), the latency targets
and the plan (`Plan` of `PoolPlan`s), with the arrangements and defaults that both the
plan of a GPU count (`costmodel.plan`) and the search for a rate (`costmodel.plan_search`)
use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from costmodel.errors import CostModelError
from costmodel.fill_phase import is_midfill
from costmodel.hardware import HardwareSpec
from costmodel.phase import Phase
from costmodel.plan_candidates import Candidate, PlanGrid, PoolShape
from costmodel.plan_sizing import Nodes

# The context percentile decode's TPOT and every slot's KV are checked at: a worker
# full of sequences this long still meets the target and fits.
CHECK_PERCENTILE = 90
DEFAULT_GRID = PlanGrid()
# How the GPUs are split (docs/plan.md): prefill, midfill and decode pools; prefill and
# decode (every fill on prefill); or aggregated workers that fill and decode. `auto`
# sizes each and keeps the one that sustains the most calls a second.
THREE_POOL, TWO_POOL, MIXED, AUTO = "three-pool", "two-pool", "mixed", "auto"
ARRANGEMENTS = (THREE_POOL, TWO_POOL, MIXED)
# The share of HBM a worker may allocate (weights, activations, buffers and its KV), as
# engines reserve it: SGLang's --mem-fraction-static (0.8-0.9 of HBM by GPU memory,
# https://docs.sglang.ai/advanced_features/server_arguments.html) and vLLM's
# --gpu-memory-utilization (default 0.9, https://docs.vllm.ai/en/latest/configuration/
# engine_args.html). It also matches the share of free HBM a bound worker gives KV
# (costmodel.capacity.KV_SHARE_OF_FREE_HBM).
DEFAULT_MEMORY_FRACTION = 0.85


class PlanError(CostModelError):
    """No plan: too few GPUs, targets no layout meets, a trace with no work."""


@dataclass(frozen=True)
class WorkloadStats:
    """The trace as the planner sees it: per call input, cached and output tokens, the
    sessions' total active time (think gaps plus recorded service), and the router's
    threshold between prefill and midfill. Midfill is split from prefill as the router
    splits it (`costmodel.fill_phase.is_midfill`: a long cached prefix and no more new
    tokens than it)."""

    sessions: int
    input_tokens: np.ndarray
    cached_tokens: np.ndarray
    output_tokens: np.ndarray
    session_time_s: float
    midfill_min_prefix_tokens: int
    arrival_span_s: float | None = None  # open-loop traces: first to last arrival

    @property
    def arrivals_per_s(self) -> float | None:
        """An open-loop trace's own call rate (None for agent sessions, which carry no
        clock: their rate is whatever session starts a replay chooses)."""
        if self.arrival_span_s is None or self.arrival_span_s <= 0:
            return None
        return self.calls / self.arrival_span_s

    @property
    def calls(self) -> int:
        return int(self.input_tokens.shape[0])

    @property
    def calls_per_session_s(self) -> float:
        """The trace's own call rate per active session."""
        return self.calls / self.session_time_s if self.session_time_s > 0 else math.nan

    def shapes(self, arrangement: str = "three-pool",
               context_window: float | None = None) -> dict[str, PoolShape]:
        """Per pool, the calls it serves. `three-pool`: prefill and midfill split as the
        router splits them (`is_midfill`); `two-pool`: every fill on prefill (the
        router's choice when a cluster has no midfill pool); `mixed`: every fill on the
        aggregated workers (the shape named `mixed`). Contexts are capped at
        `context_window` (a sequence never holds more KV than the model's context)."""
        inp, cached, out = self.input_tokens, self.cached_tokens, self.output_tokens
        window = math.inf if context_window is None else float(context_window)
        new = inp - cached
        out_shapes = {}
        everything = np.ones(inp.shape, dtype=bool)
        if arrangement == "three-pool":
            midfill = is_midfill(cached, new, self.midfill_min_prefix_tokens)
            groups = (("prefill", Phase.PREFILL, ~midfill), ("midfill", Phase.MIDFILL, midfill))
        else:
            groups = (("mixed" if arrangement == "mixed" else "prefill", Phase.PREFILL,
                       everything),)
        for name, phase, mask in groups:
            if mask.any():
                out_shapes[name] = PoolShape(
                    phase, new[mask], np.minimum(cached[mask], window),
                    max(float(new[mask].mean()), 1.0),
                    min(float(cached[mask].mean()), window), min(_pct(inp[mask]), window),
                    self.calls)
        if arrangement != "mixed" and "prefill" not in out_shapes:
            # the cluster needs one; it serves no call here
            out_shapes["prefill"] = PoolShape(
                Phase.PREFILL, new[:0], cached[:0], max(float(new.mean()), 1.0), 0.0,
                min(_pct(inp), window), self.calls)
        dec = out >= 2  # the fill's last logits give the first token
        if dec.any():
            ctx = min(_pct(inp[dec] + out[dec]), window)
            out_shapes["decode"] = PoolShape(
                Phase.DECODE, out[dec] - 1.0, np.minimum(inp[dec] + out[dec] / 2.0, window),
                1.0, ctx, ctx, self.calls)
        return out_shapes


def _pct(values: np.ndarray) -> float:
    return float(np.percentile(values, CHECK_PERCENTILE)) if values.size else 0.0


@dataclass(frozen=True)
class Targets:
    ttft_s: float  # fills: step time of a typical batch
    tpot_s: float  # decode: time per output token at the check context

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v > 0):
                raise PlanError(f"{name}: expected a number > 0, got {v!r}")


@dataclass(frozen=True)
class PoolPlan:
    name: str
    choice: Candidate
    workers: int
    shape: PoolShape  # a mixed pool: its decode shape (TPOT and KV are checked there)
    calls_per_s: float  # what this pool alone sustains
    fill_shape: PoolShape | None = None  # a mixed pool: the fills it also serves

    @property
    def calls(self) -> int:
        """Calls of the trace the pool serves."""
        return (self.fill_shape or self.shape).calls

    @property
    def gpus(self) -> int:
        return self.workers * self.choice.gpus


@dataclass(frozen=True)
class Plan:
    model: str
    hardware: HardwareSpec
    gpus: int
    nodes: Nodes
    targets: Targets
    pools: tuple[PoolPlan, ...]
    calls_per_s: float
    workload: WorkloadStats
    arrangement: str = THREE_POOL
    memory_fraction: float | None = None
    context_window_tokens: int | None = None
    # Every arrangement that planned, with the rate it sustains (the chosen one among them).
    alternatives: tuple[tuple[str, float], ...] = ()

    @property
    def used_gpus(self) -> int:
        return sum(p.gpus for p in self.pools)

    @property
    def decode_slots(self) -> int:
        """Sequences decoding together: decode pools' and mixed pools' slots."""
        return sum(p.workers * p.choice.slots for p in self.pools
                   if p.choice.phase is Phase.DECODE)

    @property
    def concurrent_sessions(self) -> float:
        """Agent sessions whose calls arrive at the sustained rate (Little's law over the
        trace's own calls per active session-second)."""
        rate = self.workload.calls_per_session_s
        return self.calls_per_s / rate if rate > 0 else math.nan

    @property
    def sessions_per_hour(self) -> float:
        """Session starts per hour that, in steady state, issue calls at the sustained
        rate (each session brings its mean number of calls)."""
        return self.calls_per_s * 3600.0 * self.workload.sessions / self.workload.calls
