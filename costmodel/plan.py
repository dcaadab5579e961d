"""`tokenfactory plan`: size a cluster's pools from a trace, as the essay's ten-step
method does (docs/sources.md), with the cost core.

Pure: workload statistics + model + hardware + GPUs + targets -> a `Plan`. Phases are
split (prefill, midfill, decode, as the router splits calls by cached prefix); for each
pool every PP/TP/EP layout and batch is priced at the trace's shapes and kept when it
meets its latency target and its KV fits beside the weights (`costmodel.plan_candidates`);
pools are then sized in whole workers from the trace's work mix within the GPUs and
their nodes (`costmodel.plan_sizing`), each arrangement by `costmodel.plan_arrangements`.
The values (`WorkloadStats`, `Targets`, `Plan`) are in `costmodel.plan_values`; the
search for the fewest GPUs that sustain a rate is `costmodel.plan_search`. The command
line reads traces and writes files.
"""

from __future__ import annotations

from costmodel import plan_values as values
from costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from costmodel.hardware import HardwareSpec
from costmodel.model import ModelSpec
from costmodel.moved_names import moved_names
from costmodel.plan_arrangements import (
    arrangement_options,
    arrangements,
    check_inputs,
    choose,
    sized,
)
from costmodel.plan_candidates import PlanGrid
from costmodel.plan_sizing import Nodes
from costmodel.precision import Precision

# Names this module held before the values and the search moved below and beside it:
# each still imports from here, with a DeprecationWarning naming its new module.
MOVED = {
    **{name: "costmodel.plan_values" for name in (
        "ARRANGEMENTS", "AUTO", "CHECK_PERCENTILE", "DEFAULT_GRID", "DEFAULT_MEMORY_FRACTION",
        "MIXED", "THREE_POOL", "TWO_POOL", "Plan", "PlanError", "PoolPlan", "Targets",
        "WorkloadStats")},
    "MAX_SIZES_PER_POOL": "costmodel.plan_arrangements",
    **{name: "costmodel.plan_search" for name in ("MAX_SEARCH_GPUS", "Search",
                                                  "plan_for_rate")},
}


def plan_cluster(model: ModelSpec, hw: HardwareSpec, gpus: int,
                 workload: values.WorkloadStats, targets: values.Targets,
                 precision: Precision, kv_precision: Precision,
                 grid: PlanGrid = values.DEFAULT_GRID, *, arrangement: str = values.AUTO,
                 memory_fraction: float | None = values.DEFAULT_MEMORY_FRACTION,
                 eff: Efficiency = DEFAULT_EFFICIENCY) -> values.Plan:
    """The plan of `gpus` GPUs: each arrangement sized, the one that sustains the most
    calls a second kept (`arrangement` forces one). `eff`: the service's (its engine's
    host gaps, `costmodel.engines`)."""
    check_inputs(gpus, workload, arrangement, memory_fraction)
    nodes = Nodes.of(gpus, hw.scale_up_domain_gpus)
    sizes = nodes.worker_sizes(gpus)
    plans = [(a, sized(arrangement_options(model, hw, workload, targets, precision,
                                           kv_precision, grid, sizes, a, memory_fraction,
                                           f"--gpus {gpus}", eff),
                       model, hw, gpus, targets, workload, memory_fraction))
             for a in arrangements(arrangement)]
    return choose(plans)


__getattr__ = moved_names(__name__, MOVED)
