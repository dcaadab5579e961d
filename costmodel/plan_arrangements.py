"""Each arrangement's pools planned: the candidates of every pool at the worker sizes
(`arrangement_options`, priced once), then sized on a GPU count (`sized`), and the
arrangement that sustains the most kept (`choose`). The plan of a GPU count
(`costmodel.plan`) and the search for a rate (`costmodel.plan_search`) are both these
steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from costmodel.efficiency import Efficiency
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
from costmodel.plan_values import (
    ARRANGEMENTS,
    AUTO,
    MIXED,
    Plan,
    PlanError,
    PoolPlan,
    Targets,
    WorkloadStats,
)
from costmodel.precision import Precision

# Candidates kept per pool for sizing: the smallest instance sizes on the (size, work)
# frontier; wider ones are rarely chosen and multiply the combinations.
MAX_SIZES_PER_POOL = 6


@dataclass(frozen=True)
class Options:
    """One arrangement's pools and each pool's candidates (one per worker size), before
    sizing; `error` says why the arrangement has none."""

    arrangement: str
    names: tuple[str, ...]
    shapes: dict[str, PoolShape]
    candidates: tuple[list[Candidate], ...]
    error: str | None = None


def check_inputs(gpus: int, workload: WorkloadStats, arrangement: str,
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


def arrangement_options(model: ModelSpec, hw: HardwareSpec, workload: WorkloadStats, targets: Targets,
             precision: Precision, kv: Precision, grid: PlanGrid, sizes: frozenset[int],
             arrangement: str, memory_fraction: float | None, where: str,
             eff: Efficiency) -> Options:
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
        return Options(MIXED, ("mixed",), shapes, (found,), error)
    names = tuple(n for n in ("prefill", "midfill", "decode") if n in shapes)
    per_pool = []
    for name in names:
        shape = shapes[name]
        target = targets.tpot_s if shape.phase is Phase.DECODE else targets.ttft_s
        found, best = pool_candidates(model, hw, shape, target, sizes, grid, precision, kv,
                                      mtp, memory_fraction=memory_fraction, queued=True,
                                      eff=eff)
        if best is None:
            return Options(arrangement, names, shapes, (), (
                f"{where}: no {name} worker of at most {most} {hw.name} GPUs (whole "
                f"{hw.scale_up_domain_gpus}-GPU nodes beyond one) holds {model.name}'s "
                f"weights and one sequence of {shape.check_context:,.0f} tokens within "
                f"{_fraction(memory_fraction)} of HBM"))
        if not found:
            option = "--tpot-target" if shape.phase is Phase.DECODE else "--ttft-target"
            what = "" if shape.phase is Phase.DECODE else " (a queued prompt: two steps)"
            return Options(arrangement, names, shapes, (), (
                f"{option} {target:g}: no {name} layout meets it; the best achievable is "
                f"{best.latency_s:.4g} s{what} ({best.layout})"))
        per_pool.append(found)
    return Options(arrangement, names, shapes, tuple(per_pool))


def _fraction(memory_fraction: float | None) -> str:
    return "the whole" if memory_fraction is None else f"{memory_fraction:g}"


def sized(opts: Options, model: ModelSpec, hw: HardwareSpec, gpus: int, targets: Targets,
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


def choose(plans: list[tuple[str, Plan | str]]) -> Plan:
    """The arrangement that sustains the most calls a second (ties: the fewer pools, then
    the order of ARRANGEMENTS); when none plans, every arrangement's reason on one line."""
    done = [p for _, p in plans if isinstance(p, Plan)]
    if not done:
        if len(plans) == 1:
            raise PlanError(str(plans[0][1]))
        raise PlanError("; ".join(f"as {a}: {r}" for a, r in plans))
    best = max(done, key=lambda p: (p.calls_per_s, -len(p.pools)))
    return replace(best, alternatives=tuple((p.arrangement, p.calls_per_s) for p in done))


def arrangements(arrangement: str) -> tuple[str, ...]:
    return ARRANGEMENTS if arrangement == AUTO else (arrangement,)


def _smallest_useful(found: list[Candidate]) -> list[Candidate]:
    """Candidates in increasing size, each doing less work per call than every smaller
    one (a bigger worker that is also slower is never worth its granularity)."""
    kept: list[Candidate] = []
    for c in sorted(found, key=lambda c: c.gpus):
        if not kept or c.gpu_s_per_call < min(k.gpu_s_per_call for k in kept):
            kept.append(c)
    return kept[:MAX_SIZES_PER_POOL]
