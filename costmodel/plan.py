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
from dataclasses import dataclass, replace

import numpy as np

from costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from costmodel.errors import CostModelError
from costmodel.hardware import HardwareSpec
from costmodel.model import ModelSpec
from costmodel.mtp import default_mtp
from costmodel.phase import Phase
from costmodel.plan_candidates import (
    Candidate,
    PlanGrid,
    PoolShape,
    mixed_candidates,
    pool_candidates,
)
from costmodel.plan_sizing import Nodes, size_pools, size_single
from costmodel.precision import Precision

# The context percentile decode's TPOT and every slot's KV are checked at: a worker
# full of sequences this long still meets the target and fits.
CHECK_PERCENTILE = 90
# Candidates kept per pool for sizing: the smallest instance sizes on the (size, work)
# frontier; wider ones are rarely chosen and multiply the combinations.
MAX_SIZES_PER_POOL = 6
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
# The GPU search's bound (`plan_for_rate`).
MAX_SEARCH_GPUS = 1_000_000


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

    def shapes(self, arrangement: str = "three-pool",
               context_window: float | None = None) -> dict[str, PoolShape]:
        """Per pool, the calls it serves. `three-pool`: prefill and midfill split by
        cached prefix, as the router splits them; `two-pool`: every fill on prefill (the
        router's choice when a cluster has no midfill pool); `mixed`: every fill on the
        aggregated workers (the shape named `mixed`). Contexts are capped at
        `context_window` (a sequence never holds more KV than the model's context)."""
        inp, cached, out = self.input_tokens, self.cached_tokens, self.output_tokens
        window = math.inf if context_window is None else float(context_window)
        new = inp - cached
        out_shapes = {}
        everything = np.ones(inp.shape, dtype=bool)
        if arrangement == "three-pool":
            groups = (("prefill", Phase.PREFILL, cached < self.midfill_min_prefix_tokens),
                      ("midfill", Phase.MIDFILL, cached >= self.midfill_min_prefix_tokens))
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


@dataclass(frozen=True)
class _Options:
    """One arrangement's pools and each pool's candidates (one per worker size), before
    sizing; `error` says why the arrangement has none."""

    arrangement: str
    names: tuple[str, ...]
    shapes: dict[str, PoolShape]
    candidates: tuple[list[Candidate], ...]
    error: str | None = None


def _check(gpus: int, workload: WorkloadStats, arrangement: str,
           memory_fraction: float | None) -> None:
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise PlanError(f"--gpus: expected an integer >= 1, got {gpus!r}")
    if arrangement not in (AUTO, *ARRANGEMENTS):
        raise PlanError(f"--arrangement: expected one of {', '.join((AUTO, *ARRANGEMENTS))}, "
                        f"got {arrangement!r}")
    if memory_fraction is not None and not (
            isinstance(memory_fraction, int | float) and 0 < memory_fraction <= 1):
        raise PlanError(f"--memory-fraction: expected a number in (0, 1], got "
                        f"{memory_fraction!r}")
    if workload.calls == 0:
        raise PlanError("the trace has no calls")
    if not (workload.output_tokens >= 2).any():
        raise PlanError("the trace has no call that decodes (every output is 0 or 1 token)")


def _options(model: ModelSpec, hw: HardwareSpec, workload: WorkloadStats, targets: Targets,
             precision: Precision, kv: Precision, grid: PlanGrid, sizes: frozenset[int],
             arrangement: str, memory_fraction: float | None, where: str,
             eff: Efficiency) -> _Options:
    """Every pool's candidates of `arrangement` at the worker `sizes`; `where` opens an
    error (`--gpus N`, or the search's option); `eff`: the service's (its engine's host
    gaps, `costmodel.engines`)."""
    shapes = workload.shapes(arrangement, model.max_context_tokens)
    most = max(sizes)
    mtp = default_mtp(model)
    if arrangement == MIXED:
        found, best = mixed_candidates(model, hw, shapes["mixed"], shapes["decode"],
                                       targets.ttft_s, targets.tpot_s, sizes, grid, precision,
                                       kv, mtp, memory_fraction=memory_fraction, eff=eff)
        error = None
        if best is None:
            error = (f"{where}: no mixed worker of at most {most} {hw.name} GPUs holds "
                     f"{model.name}'s weights and a decode batch within "
                     f"{_fraction(memory_fraction)} of HBM")
        elif not found:
            error = (f"--tpot-target {targets.tpot_s:g} / --ttft-target {targets.ttft_s:g}: "
                     f"no mixed layout meets both; the best TPOT achievable is "
                     f"{best.latency_s:.4g} s ({best.layout})")
        return _Options(MIXED, ("mixed",), shapes, (found,), error)
    names = tuple(n for n in ("prefill", "midfill", "decode") if n in shapes)
    per_pool = []
    for name in names:
        shape = shapes[name]
        target = targets.tpot_s if shape.phase is Phase.DECODE else targets.ttft_s
        found, best = pool_candidates(model, hw, shape, target, sizes, grid, precision, kv,
                                      mtp, memory_fraction=memory_fraction, queued=True,
                                      eff=eff)
        if best is None:
            return _Options(arrangement, names, shapes, (), (
                f"{where}: no {name} worker of at most {most} {hw.name} GPUs (whole "
                f"{hw.scale_up_domain_gpus}-GPU nodes beyond one) holds {model.name}'s "
                f"weights and one sequence of {shape.check_context:,.0f} tokens within "
                f"{_fraction(memory_fraction)} of HBM"))
        if not found:
            option = "--tpot-target" if shape.phase is Phase.DECODE else "--ttft-target"
            what = "" if shape.phase is Phase.DECODE else " (a queued prompt: two steps)"
            return _Options(arrangement, names, shapes, (), (
                f"{option} {target:g}: no {name} layout meets it; the best achievable is "
                f"{best.latency_s:.4g} s{what} ({best.layout})"))
        per_pool.append(found)
    return _Options(arrangement, names, shapes, tuple(per_pool))


def _fraction(memory_fraction: float | None) -> str:
    return "the whole" if memory_fraction is None else f"{memory_fraction:g}"


def _sized(opts: _Options, model: ModelSpec, hw: HardwareSpec, gpus: int, targets: Targets,
           workload: WorkloadStats, memory_fraction: float | None) -> Plan | str:
    """`opts` sized on `gpus`: the plan, or why not (a line)."""
    if opts.error is not None:
        return opts.error
    nodes = Nodes.of(gpus, hw.scale_up_domain_gpus)
    sizes = nodes.worker_sizes(gpus)
    per_pool = [_smallest_useful([c for c in cs if c.gpus in sizes]) for cs in opts.candidates]
    sizing = None
    if all(per_pool):
        sizing = (size_single(per_pool[0], nodes) if len(per_pool) == 1
                  else size_pools(per_pool, nodes))
    if sizing is None:
        smallest = ", ".join(f"{n} {min(c.gpus for c in cs)}" for n, cs in
                             zip(opts.names, opts.candidates, strict=True))
        return (f"--gpus {gpus}: too few for one worker of each pool of {model.name} on "
                f"{hw.name} as {opts.arrangement} (smallest workers: {smallest} GPUs)")
    if not math.isfinite(sizing.calls_per_s):
        raise PlanError("the trace has no work for any pool (no tokens to compute)")
    if opts.arrangement == MIXED:
        (c,), (w,) = sizing.choice, sizing.workers
        pools = (PoolPlan("mixed", c, w, opts.shapes["decode"], sizing.pool_rate(0),
                          opts.shapes["mixed"]),)
    else:
        pools = tuple(PoolPlan(n, c, w, opts.shapes[n], sizing.pool_rate(i))
                      for i, (n, c, w) in enumerate(zip(opts.names, sizing.choice,
                                                        sizing.workers, strict=True)))
    return Plan(model.name, hw, gpus, nodes, targets, pools, sizing.calls_per_s, workload,
                opts.arrangement, memory_fraction, model.max_context_tokens)


def _choose(plans: list[tuple[str, Plan | str]]) -> Plan:
    """The arrangement that sustains the most calls a second (ties: the fewer pools, then
    the order of ARRANGEMENTS); when none plans, every arrangement's reason on one line."""
    done = [p for _, p in plans if isinstance(p, Plan)]
    if not done:
        if len(plans) == 1:
            raise PlanError(str(plans[0][1]))
        raise PlanError("; ".join(f"as {a}: {r}" for a, r in plans))
    best = max(done, key=lambda p: (p.calls_per_s, -len(p.pools)))
    return replace(best, alternatives=tuple((p.arrangement, p.calls_per_s) for p in done))


def _arrangements(arrangement: str) -> tuple[str, ...]:
    return ARRANGEMENTS if arrangement == AUTO else (arrangement,)


def plan_cluster(model: ModelSpec, hw: HardwareSpec, gpus: int, workload: WorkloadStats,
                 targets: Targets, precision: Precision, kv_precision: Precision,
                 grid: PlanGrid = DEFAULT_GRID, *, arrangement: str = AUTO,
                 memory_fraction: float | None = DEFAULT_MEMORY_FRACTION,
                 eff: Efficiency = DEFAULT_EFFICIENCY) -> Plan:
    """The plan of `gpus` GPUs: each arrangement sized, the one that sustains the most
    calls a second kept (`arrangement` forces one). `eff`: the service's (its engine's
    host gaps, `costmodel.engines`)."""
    _check(gpus, workload, arrangement, memory_fraction)
    nodes = Nodes.of(gpus, hw.scale_up_domain_gpus)
    sizes = nodes.worker_sizes(gpus)
    plans = [(a, _sized(_options(model, hw, workload, targets, precision, kv_precision, grid,
                                 sizes, a, memory_fraction, f"--gpus {gpus}", eff),
                        model, hw, gpus, targets, workload, memory_fraction))
             for a in _arrangements(arrangement)]
    return _choose(plans)


@dataclass(frozen=True)
class Search:
    """`plan_for_rate`'s answer: the plan on the fewest GPUs found that sustains the rate
    (and holds the decode slots), and every count tried with its rate (None: no plan)."""

    plan: Plan
    calls_per_s_needed: float
    slots_needed: int
    tried: tuple[tuple[int, float | None], ...]


def plan_for_rate(model: ModelSpec, hw: HardwareSpec, workload: WorkloadStats,
                  targets: Targets, precision: Precision, kv_precision: Precision,
                  calls_per_s: float, *, slots: int = 0, option: str,
                  grid: PlanGrid = DEFAULT_GRID, arrangement: str = AUTO,
                  memory_fraction: float | None = DEFAULT_MEMORY_FRACTION,
                  max_gpus: int = MAX_SEARCH_GPUS,
                  eff: Efficiency = DEFAULT_EFFICIENCY) -> Search:
    """The smallest GPU count whose plan sustains `calls_per_s` with at least `slots`
    decode slots, under the targets. Candidates are priced once (every worker size the
    grid makes); each count tried is then only sized. Counts are tried doubling until a
    plan exists, then at the count its rate extrapolates to (10% over) until one meets
    the need; the bracket between the last that did not and the first that did is then
    narrowed to neighbours by the Illinois method on the rate (with decode slots to meet,
    by bisection).
    Sizing in whole workers on whole nodes is not strictly monotone in the count: a
    count inside the bracket that packs worse is not what bisection finds, one that packs
    better than its neighbours may be missed (a few GPUs at most)."""
    _check(1, workload, arrangement, memory_fraction)
    if not (math.isfinite(calls_per_s) and calls_per_s > 0):
        raise PlanError(f"{option}: the rate it asks for is not a positive number of calls/s")
    widest = max(grid.pp) * max(*grid.tp, *grid.ep, hw.scale_up_domain_gpus)
    sizes = Nodes.of(widest, hw.scale_up_domain_gpus).worker_sizes(widest)
    opts = [_options(model, hw, workload, targets, precision, kv_precision, grid, sizes, a,
                     memory_fraction, option, eff) for a in _arrangements(arrangement)]
    if all(o.error is not None for o in opts):
        _choose([(o.arrangement, o.error or "") for o in opts])
    tried: list[tuple[int, float | None]] = []

    def at(n: int) -> Plan | None:
        plans = [(o.arrangement, _sized(o, model, hw, n, targets, workload, memory_fraction))
                 for o in opts]
        plan = _choose(plans) if any(isinstance(p, Plan) for _, p in plans) else None
        tried.append((n, None if plan is None else plan.calls_per_s))
        return plan

    def meets(plan: Plan | None) -> bool:
        return plan is not None and plan.calls_per_s >= calls_per_s and plan.decode_slots >= slots

    n, low, low_rate, plan = 1, 0, 0.0, None
    while True:
        plan = at(n)
        if meets(plan):
            break
        low, low_rate = n, 0.0 if plan is None else plan.calls_per_s
        if n >= max_gpus:
            raise PlanError(f"{option}: not met on up to {max_gpus:,} {hw.name} GPUs (at "
                            f"{n:,}: " + ("no plan" if plan is None else
                                          f"{plan.calls_per_s:.3g} calls/s, "
                                          f"{plan.decode_slots:,} decode slots") + ")")
        step = 2 * n
        if plan is not None and plan.calls_per_s > 0:
            scale = max(calls_per_s / plan.calls_per_s,
                        slots / plan.decode_slots if plan.decode_slots else 1.0)
            step = max(n + 1, math.ceil(1.1 * n * scale))
        n = min(step, max_gpus)
    high, best = n, plan
    # Narrow the bracket to neighbours by the Illinois method: the count where the line
    # through the two ends' rates reaches the need (rates grow about linearly with the
    # GPUs), the weight of an end kept twice in a row halved so that the other end
    # moves too; with decode slots to meet as well, by midpoints.
    f_low, f_high, kept = low_rate - calls_per_s, best.calls_per_s - calls_per_s, ""
    while high - low > 1:
        mid = (low + high) // 2
        if not slots and f_high > f_low:
            guess = low + (high - low) * (-f_low) / (f_high - f_low)
            mid = min(max(math.ceil(guess), low + 1), high - 1)
        p = at(mid)
        if meets(p):
            high, best, f_high = mid, p, p.calls_per_s - calls_per_s
            f_low, kept = (f_low / 2 if kept == "low" else f_low), "low"
        else:
            low, f_low = mid, (0.0 if p is None else p.calls_per_s) - calls_per_s
            f_high, kept = (f_high / 2 if kept == "high" else f_high), "high"
    return Search(best, calls_per_s, slots, tuple(tried))


def _smallest_useful(found: list[Candidate]) -> list[Candidate]:
    """Candidates in increasing size, each doing less work per call than every smaller
    one (a bigger worker that is also slower is never worth its granularity)."""
    kept: list[Candidate] = []
    for c in sorted(found, key=lambda c: c.gpus):
        if not kept or c.gpu_s_per_call < min(k.gpu_s_per_call for k in kept):
            kept.append(c)
    return kept[:MAX_SIZES_PER_POOL]
