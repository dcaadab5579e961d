"""Hypothesis strategies for stability tests: traffic, perturbations, load envelopes.

Loads are given relative to the kit cluster's capacity as the cost core predicts it
(`capacity_calls_per_s`), so "below 90% of capacity" or "twice capacity" mean the same
whatever the call shape.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
from hypothesis import strategies as st

from costmodel.model import load_model
from costmodel.phase import Phase
from orchestrator.kit.scenario import KIT_CLUSTER, KIT_MODEL, Scenario
from workers.cluster import cluster_from_dict
from workers.pricing import StepPricer

ARRIVAL_KINDS = ("poisson", "bursts", "diurnal")


@cache
def capacity_calls_per_s(input_tokens: int = 2048, output_tokens: int = 64) -> float:
    """The kit cluster's predicted capacity for single calls of this shape: the slower of
    its fill pools and its decode pool at target batch."""
    model = load_model(KIT_MODEL)
    bound = cluster_from_dict(KIT_CLUSTER, "kit-small").bind(model)
    fill = decode = 0.0
    for w in bound.workers:
        pricer = StepPricer(model, w.hardware, w.layout)
        if w.phase is Phase.PREFILL:
            fill += 1.0 / pricer.fill_s(Phase.PREFILL, 1, input_tokens, 0)[1]
        elif w.phase is Phase.DECODE:
            slots = w.batch.target_batch * pricer.attention_ranks
            per_call = pricer.decode_steps_s(slots, input_tokens, max(output_tokens - 1, 1)).sum()
            decode += slots / per_call
    return min(fill, decode)


def arrival_times(kind: str, rate_per_s: float, n: int, rng: np.random.Generator,
                  burst: int = 3) -> tuple[float, ...]:
    """n arrival times at a mean rate: Poisson, bursts of `burst` at once, or a diurnal
    ramp (rate swinging between 0.2x and 1.8x over the span, by thinning)."""
    if kind == "poisson":
        times = np.cumsum(rng.exponential(1.0 / rate_per_s, n))
    elif kind == "bursts":
        times = np.repeat(np.cumsum(rng.exponential(burst / rate_per_s, math.ceil(n / burst))),
                          burst)[:n]
    elif kind == "diurnal":
        span = n / rate_per_s
        out: list[float] = []
        t = 0.0
        while len(out) < n:
            t += float(rng.exponential(1.0 / (1.8 * rate_per_s)))
            swing = 1.0 - 0.8 * math.cos(2 * math.pi * t / span)
            if rng.random() < swing / 1.8:
                out.append(t)
        times = np.asarray(out)
    else:
        raise ValueError(f"unknown arrival kind {kind!r}; known: {', '.join(ARRIVAL_KINDS)}")
    return tuple(float(x) for x in np.round(times, 6))


@st.composite
def open_loop_arrivals(draw, load=(0.1, 0.9), max_calls=40, output_tokens=64,
                       kinds=ARRIVAL_KINDS, min_calls=5):
    """Arrival times at `load` (a fraction range) of the kit cluster's capacity."""
    fraction = draw(st.floats(*load))
    rate = fraction * capacity_calls_per_s(2048, output_tokens)
    n = draw(st.integers(min_calls, max_calls))
    kind = draw(st.sampled_from(kinds))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return arrival_times(kind, rate, n, rng, burst=draw(st.integers(2, 5)))


@st.composite
def perturbations(draw, horizon_s=60.0):
    """Cluster perturbations: a pool losing a worker, slower storage, a longer lag."""
    losses = ()
    if draw(st.booleans()):
        losses = ((draw(st.floats(0.0, horizon_s)), draw(st.sampled_from(["decode"])), 1),)
    return {
        "lose_workers": losses,
        "storage_slowdown": draw(st.sampled_from([1.0, 4.0, 20.0])),
        "observation_lag_s": draw(st.sampled_from([0.0, 2.0, 5.0])),
    }


@st.composite
def agent_load(draw, max_sessions=6, max_calls=8):
    """Closed-loop synthetic agent sessions (traces.synth), cut short."""
    return {"agent_sessions": draw(st.integers(1, max_sessions)),
            "agent_calls": draw(st.integers(2, max_calls)),
            "agent_seed": draw(st.integers(0, 10_000)),
            "think_scale": draw(st.sampled_from([0.01, 0.05]))}


@st.composite
def scenarios(draw, controller: str, load=(0.1, 0.9), perturb=True, agents=True,
              output_tokens=64, max_calls=40, realloc=False, min_calls=5,
              kinds=ARRIVAL_KINDS):
    """Scenarios for `controller` at `load` of capacity: open-loop arrivals, or agent
    sessions; perturbed or not."""
    fields: dict = {"controller": controller, "seed": draw(st.integers(0, 1000)),
                    "output_tokens": output_tokens, "realloc": realloc}
    if agents and draw(st.booleans()):
        fields.update(draw(agent_load()))
    else:
        fields["arrivals_s"] = draw(open_loop_arrivals(load, max_calls, output_tokens,
                                                       kinds=kinds, min_calls=min_calls))
    if perturb:
        fields.update(draw(perturbations()))
    return Scenario(**fields)
