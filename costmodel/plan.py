"""`tokenfactory plan`: size a cluster's pools from a trace, as the essay's ten-step
method does (docs/sources.md), with the cost core.

Pure: workload statistics + model + hardware + GPUs + targets -> a `Plan`. Phases are
split (prefill, midfill, decode, as the router splits calls by cached prefix); for each
pool every PP/TP/EP layout and batch is priced at the trace's shapes and kept when it
meets its latency target and its KV fits beside the weights (`costmodel.plan_candidates`);
pools are then sized in whole workers from the trace's work mix within the GPUs and
their nodes (`costmodel.plan_sizing`). The command line reads traces and writes files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from costmodel.errors import CostModelError
from costmodel.hardware import HardwareSpec
from costmodel.model import ModelSpec
from costmodel.mtp import default_mtp
from costmodel.phase import Phase
from costmodel.plan_candidates import Candidate, PlanGrid, PoolShape, pool_candidates
from costmodel.plan_sizing import Nodes, Sizing, size_pools
from costmodel.precision import Precision

# The context percentile decode's TPOT and every slot's KV are checked at: a worker
# full of sequences this long still meets the target and fits.
CHECK_PERCENTILE = 90
# Candidates kept per pool for sizing: the smallest instance sizes on the (size, work)
# frontier; wider ones are rarely chosen and multiply the combinations.
MAX_SIZES_PER_POOL = 6
DEFAULT_GRID = PlanGrid()


class PlanError(CostModelError):
    """No plan: too few GPUs, targets no layout meets, a trace with no work."""


@dataclass(frozen=True)
class WorkloadStats:
    """The trace as the planner sees it: per call input, cached and output tokens, the
    sessions' total active time (think gaps plus recorded service), and the router's
    threshold between prefill and midfill. Decode and midfill are split from prefill
    by cached prefix, as the router splits them."""

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

    def shapes(self) -> dict[str, PoolShape]:
        """Per pool, the calls it serves (prefill and midfill by cached prefix)."""
        inp, cached, out = self.input_tokens, self.cached_tokens, self.output_tokens
        new = inp - cached
        out_shapes = {}
        for name, phase, mask in (("prefill", Phase.PREFILL,
                                   cached < self.midfill_min_prefix_tokens),
                                  ("midfill", Phase.MIDFILL,
                                   cached >= self.midfill_min_prefix_tokens)):
            if mask.any():
                out_shapes[name] = PoolShape(
                    phase, new[mask], cached[mask], max(float(new[mask].mean()), 1.0),
                    float(cached[mask].mean()), _pct(inp[mask]), self.calls)
        if "prefill" not in out_shapes:  # the cluster needs one; it serves no call here
            out_shapes["prefill"] = PoolShape(
                Phase.PREFILL, new[:0], cached[:0], max(float(new.mean()), 1.0), 0.0,
                _pct(inp), self.calls)
        dec = out >= 2  # the fill's last logits give the first token
        if dec.any():
            ctx = _pct(inp[dec] + out[dec])
            out_shapes["decode"] = PoolShape(
                Phase.DECODE, out[dec] - 1.0, inp[dec] + out[dec] / 2.0, 1.0, ctx, ctx,
                self.calls)
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
    shape: PoolShape
    calls_per_s: float  # what this pool alone sustains

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

    @property
    def used_gpus(self) -> int:
        return sum(p.gpus for p in self.pools)

    @property
    def decode_slots(self) -> int:
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


def plan_cluster(model: ModelSpec, hw: HardwareSpec, gpus: int, workload: WorkloadStats,
                 targets: Targets, precision: Precision, kv_precision: Precision,
                 grid: PlanGrid = DEFAULT_GRID, eff: Efficiency = DEFAULT_EFFICIENCY) -> Plan:
    """`eff`: the service's (its engine's host gaps, `costmodel.engines`)."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise PlanError(f"--gpus: expected an integer >= 1, got {gpus!r}")
    if workload.calls == 0:
        raise PlanError("the trace has no calls")
    nodes = Nodes.of(gpus, hw.scale_up_domain_gpus)
    sizes = nodes.worker_sizes(gpus)
    shapes = workload.shapes()
    names = [n for n in ("prefill", "midfill", "decode") if n in shapes]
    if "decode" not in names:
        raise PlanError("the trace has no call that decodes (every output is 0 or 1 token)")
    per_pool = []
    for name in names:
        shape = shapes[name]
        target = targets.tpot_s if shape.phase is Phase.DECODE else targets.ttft_s
        found, best = pool_candidates(model, hw, shape, target, sizes, grid, precision,
                                      kv_precision, default_mtp(model), eff)
        if best is None:
            raise PlanError(
                f"--gpus {gpus}: no {name} worker of at most {gpus} {hw.name} GPUs (whole "
                f"{hw.scale_up_domain_gpus}-GPU nodes beyond one) holds {model.name}'s "
                f"weights and one sequence of {shape.check_context:,.0f} tokens")
        if not found:
            option = "--tpot-target" if shape.phase is Phase.DECODE else "--ttft-target"
            raise PlanError(
                f"{option} {target:g}: no {name} layout meets it; the best achievable is "
                f"{best.latency_s:.4g} s ({best.layout})")
        per_pool.append(_smallest_useful(found))
    sizing = size_pools(per_pool, nodes)
    if sizing is None:
        smallest = ", ".join(f"{n} {min(c.gpus for c in cs)}" for n, cs in zip(names, per_pool,
                                                                                strict=True))
        raise PlanError(f"--gpus {gpus}: too few for one worker of each pool of {model.name} "
                        f"on {hw.name} (smallest workers: {smallest} GPUs)")
    return _plan(model, hw, gpus, nodes, targets, names, shapes, sizing, workload)


def _smallest_useful(found: list[Candidate]) -> list[Candidate]:
    """Candidates in increasing size, each doing less work per call than every smaller
    one (a bigger worker that is also slower is never worth its granularity)."""
    kept: list[Candidate] = []
    for c in sorted(found, key=lambda c: c.gpus):
        if not kept or c.gpu_s_per_call < min(k.gpu_s_per_call for k in kept):
            kept.append(c)
    return kept[:MAX_SIZES_PER_POOL]


def _plan(model, hw, gpus, nodes, targets, names, shapes, sizing: Sizing, workload) -> Plan:
    pools = tuple(PoolPlan(n, c, w, shapes[n], sizing.pool_rate(i))
                  for i, (n, c, w) in enumerate(zip(names, sizing.choice, sizing.workers,
                                                    strict=True)))
    if not math.isfinite(sizing.calls_per_s):
        raise PlanError("the trace has no work for any pool (no tokens to compute)")
    return Plan(model.name, hw, gpus, nodes, targets, pools, sizing.calls_per_s, workload)
