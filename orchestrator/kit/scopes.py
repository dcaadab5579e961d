"""The overload properties' scopes: the kinds of sustained overload the kit draws.

- `DECODE_BOUND`: decode is the bottleneck (outputs of 256-1,024 tokens), no lull:
  `strategies.overload_scenarios` with its defaults;
- `FILL_BOUND`: short outputs (16-64 tokens), for which the kit cluster's one prefill
  worker (6.6 calls/s) is the bottleneck and decode (8.9 calls/s at 64 tokens) is not;
- `LULLS`: decode-bound traffic whose open-loop arrivals stop (agent sessions already
  running go on) for long enough that decode drains what was queued and then idles for
  10-40 s (in the fluid model of `strategies.without_lulls`), then return as they were.

Every perturbation of the decode-bound scope (lag, slower storage, biased predictor, a
decode worker lost, agent sessions) is drawn in each. docs/plugins.md has which
built-in controllers hold which property in which scope, with the figures.
"""

from __future__ import annotations

from dataclasses import replace
from enum import Enum

import numpy as np
from hypothesis import strategies as st

from orchestrator.kit.strategies import capacity_calls_per_s, overload_scenarios

# Mean outputs for which the fill pool is the bottleneck: the kit cluster's capacity for
# them is its prefill worker's 5.07 calls/s (decode's: 9.0 at 64 tokens, more below).
FILL_BOUND_MEAN_OUTPUTS = (16, 32, 64)
# A lull: from 25-60% into the arrivals, long enough to drain the work queued by then
# and leave decode idle for 10-40 s (a slow-loop period is 60 s: the index's detrending
# does not absorb it).
LULL_START = (0.25, 0.6)
LULL_IDLE_S = (10.0, 40.0)


class OverloadScope(Enum):
    DECODE_BOUND = "decode-bound"
    FILL_BOUND = "fill-bound"
    LULLS = "lulls"

    def describe(self) -> str:
        return {
            OverloadScope.DECODE_BOUND: "decode-bound overload (outputs 256-1,024 tokens), "
                                        "no lull",
            OverloadScope.FILL_BOUND: "fill-bound overload (outputs 16-64 tokens: the prefill "
                                      "pool is the bottleneck)",
            OverloadScope.LULLS: "decode-bound overload with a lull (arrivals near zero for "
                                 "10-40 s, then back)",
        }[self]


def lull_s(arrivals: tuple[float, ...], outputs: tuple[int, ...], mean: int,
           capacity_per_s: float, start_s: float, idle_s: float) -> float:
    """How long a lull from `start_s` must last for decode to drain the work arrived
    before it and then idle `idle_s`, in the fluid model of `strategies.without_lulls`
    (each call holding decode for (its output / `mean`) / `capacity_per_s` seconds, from
    the first arrival on)."""
    t = np.asarray(arrivals)
    work_s = float(np.sum(np.asarray(outputs, dtype=float)[t < start_s])) / mean / capacity_per_s
    return max(0.0, work_s - (start_s - t[0])) + idle_s


def with_lull(arrivals: tuple[float, ...], start_s: float, gap_s: float
              ) -> tuple[float, ...]:
    """The arrivals from `start_s` on, `gap_s` later: none arrives in between (agent
    sessions already running go on), then the traffic returns as it was."""
    return tuple(round(t + gap_s, 6) if t >= start_s else t for t in arrivals)


@st.composite
def _lulls(draw, controller: str, **kwargs):
    scenario = draw(overload_scenarios(controller, **kwargs))
    mean, arrivals = scenario.output_tokens, scenario.arrivals_s
    start_s = arrivals[0] + draw(st.floats(*LULL_START)) * (arrivals[-1] - arrivals[0])
    gap_s = round(lull_s(arrivals, scenario.output_tokens_each, mean,
                         capacity_calls_per_s(2048, mean), start_s,
                         draw(st.floats(*LULL_IDLE_S))), 3)
    return replace(scenario, arrivals_s=with_lull(arrivals, start_s, gap_s),
                   agent_starts_s=with_lull(scenario.agent_starts_s, start_s, gap_s))


def scoped_scenarios(controller: str, scope: OverloadScope, **kwargs):
    """Overload scenarios for `controller` in `scope` (keyword arguments go to
    `strategies.overload_scenarios`)."""
    scope = OverloadScope(scope)
    if scope is OverloadScope.DECODE_BOUND:
        return overload_scenarios(controller, **kwargs)
    if scope is OverloadScope.FILL_BOUND:
        return overload_scenarios(controller, **{"mean_outputs": FILL_BOUND_MEAN_OUTPUTS,
                                                 **kwargs})
    return _lulls(controller, **kwargs)
