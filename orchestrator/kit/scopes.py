"""The overload properties' scopes: the kinds of sustained overload the kit draws.

- `DECODE_BOUND`: decode is the bottleneck (outputs of 256-1,024 tokens), no lull:
  `strategies.overload_scenarios` with its defaults;
- `FILL_BOUND`: short outputs (16-64 tokens), for which the kit cluster's one prefill
  worker (5.1 calls/s) is the bottleneck and decode (9.0 calls/s at 64 tokens) is not;
- `LULLS`: decode-bound traffic whose arrivals drop to near zero for a while (10-40 s,
  a twentieth of the calls kept) and then return.

Every perturbation of the decode-bound scope (lag, slower storage, biased predictor, a
decode worker lost, agent sessions) is drawn in each. docs/plugins.md has which
built-in controllers hold which property in which scope, with the figures.
"""

from __future__ import annotations

from dataclasses import replace
from enum import Enum

import numpy as np
from hypothesis import strategies as st

from orchestrator.kit.strategies import overload_scenarios

# Mean outputs for which the fill pool is the bottleneck: the kit cluster's capacity for
# them is its prefill worker's 5.07 calls/s (decode's: 9.0 at 64 tokens, more below).
FILL_BOUND_MEAN_OUTPUTS = (16, 32, 64)
# A lull: from 25-60% into the arrivals, 10-40 s long (a slow-loop period is 60 s, so the
# index's detrending does not absorb it), each arrival inside it kept with this chance.
LULL_START = (0.25, 0.6)
LULL_S = (10.0, 40.0)
LULL_KEEP = 0.05


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


def with_lull(arrivals: tuple[float, ...], outputs: tuple[int, ...], start_fraction: float,
              lull_s: float, keep_seed: int) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """The traffic with the arrivals in [start, start + lull_s) thinned to LULL_KEEP of
    them (start: `start_fraction` of the way from the first arrival to the last)."""
    t = np.asarray(arrivals)
    start = t[0] + start_fraction * (t[-1] - t[0])
    inside = (t >= start) & (t < start + lull_s)
    kept = ~inside | (np.random.default_rng(keep_seed).random(len(t)) < LULL_KEEP)
    return (tuple(float(x) for x in t[kept]),
            tuple(int(x) for x, k in zip(outputs, kept, strict=True) if k))


@st.composite
def _lulls(draw, controller: str, **kwargs):
    scenario = draw(overload_scenarios(controller, **kwargs))
    arrivals, outputs = with_lull(scenario.arrivals_s, scenario.output_tokens_each,
                                  draw(st.floats(*LULL_START)), draw(st.floats(*LULL_S)),
                                  draw(st.integers(0, 2**32 - 1)))
    starts = scenario.agent_starts_s
    if starts:  # agents join among the arrivals left: none before the first
        starts = tuple(sorted(max(s, arrivals[0]) for s in starts))
    return replace(scenario, arrivals_s=arrivals, output_tokens_each=outputs,
                   agent_starts_s=starts)


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
