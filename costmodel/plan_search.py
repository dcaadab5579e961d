"""`tokenfactory plan --calls-per-s` / `--sessions-per-hour`: the fewest GPUs whose plan
sustains a rate, searched over GPU counts with every pool's candidates priced once
(`costmodel.plan_arrangements`); each count tried is only sized.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from costmodel.hardware import HardwareSpec
from costmodel.model import ModelSpec
from costmodel.plan_arrangements import (
    arrangement_options,
    arrangements,
    check_inputs,
    choose,
    sized,
)
from costmodel.plan_candidates import PlanGrid
from costmodel.plan_sizing import Nodes
from costmodel.plan_values import (
    AUTO,
    DEFAULT_GRID,
    DEFAULT_MEMORY_FRACTION,
    Plan,
    PlanError,
    Targets,
    WorkloadStats,
)
from costmodel.precision import Precision

# The GPU search's bound (`plan_for_rate`).
MAX_SEARCH_GPUS = 1_000_000


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
    check_inputs(1, workload, arrangement, memory_fraction)
    if not (math.isfinite(calls_per_s) and calls_per_s > 0):
        raise PlanError(f"{option}: the rate it asks for is not a positive number of calls/s")
    widest = max(grid.pp) * max(*grid.tp, *grid.ep, hw.scale_up_domain_gpus)
    sizes = Nodes.of(widest, hw.scale_up_domain_gpus).worker_sizes(widest)
    opts = [arrangement_options(model, hw, workload, targets, precision, kv_precision, grid, sizes, a,
                     memory_fraction, option, eff) for a in arrangements(arrangement)]
    if all(o.error is not None for o in opts):
        choose([(o.arrangement, o.error or "") for o in opts])
    tried: list[tuple[int, float | None]] = []

    def at(n: int) -> Plan | None:
        plans = [(o.arrangement, sized(o, model, hw, n, targets, workload, memory_fraction))
                 for o in opts]
        plan = choose(plans) if any(isinstance(p, Plan) for _, p in plans) else None
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
