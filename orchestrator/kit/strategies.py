"""Hypothesis strategies for stability tests: traffic, perturbations, load envelopes.

Loads are given relative to the kit cluster's capacity as the cost core predicts it
(`capacity_calls_per_s`), so "below 90% of capacity" or "twice capacity" mean the same
whatever the call shape. `overload_scenarios` draws the overload properties' scenarios;
its defaults (the OVERLOAD_* constants) are those properties' stated scope.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
from hypothesis import strategies as st

from costmodel.model import load_model
from costmodel.phase import Phase
from orchestrator.control.config import ControlConfig
from orchestrator.kit.scenario import KIT_CLUSTER, KIT_MODEL, Scenario
from workers.cluster_toml import cluster_from_dict
from workers.pricing import StepPricer

ARRIVAL_KINDS = ("poisson", "bursts", "diurnal")

# The decode-bound scope of the overload properties (properties.oscillation_below and
# starvation_below; scopes.OverloadScope; docs/plugins.md), as the defaults of
# overload_scenarios.
# Sustained overload on decode: open-loop calls at 1.5-2.5x the kit cluster's capacity for
# 60-90 s, Poisson or in bursts of up to OVERLOAD_MAX_BURST calls at
# once, with a queue at the start just deep enough that no realised lull idles decode
# (without_lulls).
OVERLOAD = (1.5, 2.5)
OVERLOAD_SPAN_S = (60.0, 90.0)
OVERLOAD_MAX_BURST = 8
# Mean outputs for which decode is the bottleneck: the kit cluster's decode capacity for
# them (2.2, 1.1, 0.55 calls/s) is under half its fill capacity (6.6 calls/s). At 64
# tokens the fill pool is (decode 8.9 calls/s): decode then waits on fills whatever the
# controller. Each call's output is the mean, or log-normal about it (sigma <= 1).
OVERLOAD_MEAN_OUTPUTS = (256, 512, 1024)
# Up to 6 synthetic agent sessions mixed in (2-12 turns of growing context, think gaps at
# 0.05, 0.2 or 1x), joining after the first quarter of the arrivals, with no call longer
# than the prefill pool fills cold within the ready buffer's seconds of decode service
# (64,512 tokens for its 8 s): a longer cold fill holds the one prefill worker for longer
# than the buffer lasts, and so does any cold fill before a buffer exists.
OVERLOAD_MAX_AGENTS = 6
# Perturbations: observation lag, storage slowed down, the controller's predictor biased.
OVERLOAD_LAG_S = (0.0, 5.0)
OVERLOAD_STORAGE_SLOWDOWNS = (1.0, 4.0, 20.0)
OVERLOAD_PREDICTOR_ERROR = (0.7, 1.3)


@cache
def _model():
    return load_model(KIT_MODEL)


@cache
def capacity_calls_per_s(input_tokens: int = 2048, output_tokens: int = 64) -> float:
    """The kit cluster's predicted capacity for single calls of this shape: the slower of
    its fill pools and its decode pool at target batch."""
    model = _model()
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


@cache
def longest_cold_fill_tokens(seconds: float) -> int:
    """The longest prompt (in 1,024-token steps) the kit cluster's prefill pool fills cold,
    alone, within `seconds`, as the cost core predicts it."""
    model = _model()
    bound = cluster_from_dict(KIT_CLUSTER, "kit-small").bind(model)
    w = next(w for w in bound.workers if w.phase is Phase.PREFILL)
    pricer = StepPricer(model, w.hardware, w.layout)
    tokens = 1024
    while pricer.fill_s(Phase.PREFILL, 1, tokens + 1024, 0)[0] <= seconds:
        tokens += 1024
    return tokens


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


def without_lulls(arrivals: tuple[float, ...], outputs: tuple[int, ...], mean: int,
                  capacity_per_s: float) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """The same traffic with calls of `mean` output queued at the first arrival, as few
    as keep decode in work throughout: in a fluid model where each call holds decode for
    (its output / `mean`) / `capacity_per_s` seconds, the work arrived before every call
    outlasts the time until it comes. Without them a realised lull (a gap in Poisson or
    burst arrivals, a run of short outputs) idles decode whatever the controller."""
    work = np.cumsum(np.asarray(outputs, dtype=float)) / mean / capacity_per_s
    before = np.concatenate(([0.0], work[:-1]))
    deficit = float(np.max(np.asarray(arrivals) - arrivals[0] - before))
    extra = max(0, math.ceil(deficit * capacity_per_s))
    return (arrivals[0],) * extra + arrivals, (mean,) * extra + outputs


@st.composite
def output_lengths(draw, n: int, mean: int) -> tuple[int, ...]:
    """n output lengths with mean about `mean`: all equal, or log-normal with a drawn
    spread (sigma 0.25-1.0: the longest of 200 calls is then ~2-15x the mean)."""
    if draw(st.booleans()):
        return (mean,) * n
    sigma = draw(st.floats(0.25, 1.0))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lengths = rng.lognormal(math.log(mean) - sigma * sigma / 2, sigma, n)
    return tuple(int(x) for x in np.clip(np.round(lengths), 8, 32 * mean))


@st.composite
def overload_scenarios(draw, controller: str, load=OVERLOAD, span_s=OVERLOAD_SPAN_S,
                       mean_outputs=OVERLOAD_MEAN_OUTPUTS, max_burst=OVERLOAD_MAX_BURST,
                       max_agents=OVERLOAD_MAX_AGENTS, think_scales=(0.05, 0.2, 1.0),
                       lag_s=OVERLOAD_LAG_S, storage_slowdowns=OVERLOAD_STORAGE_SLOWDOWNS,
                       predictor_error=OVERLOAD_PREDICTOR_ERROR, lose_decode_worker=True,
                       agent_max_tokens: int | None = None):
    """Sustained overload for `controller`: open-loop calls at `load` x the kit cluster's
    capacity for their mean output (Poisson, or bursts of up to `max_burst` at once),
    with varied output lengths, agent sessions mixed in (up to `max_agents`, starting
    among the arrivals, multi-turn with growing context, think gaps scaled by one of
    `think_scales`), and the kit's perturbations: an observation lag in `lag_s`, storage
    slowed down, a biased predictor, a decode worker lost. Agent calls are at most
    `agent_max_tokens` long (None: what the prefill pool fills cold within the ready
    buffer's seconds, `longest_cold_fill_tokens`)."""
    if agent_max_tokens is None:
        agent_max_tokens = longest_cold_fill_tokens(ControlConfig().ready_buffer_s)
    mean = draw(st.sampled_from(mean_outputs))
    rate = draw(st.floats(*load)) * capacity_calls_per_s(2048, mean)
    n = math.ceil(rate * draw(st.floats(*span_s)))
    kind = draw(st.sampled_from(("poisson", "bursts")))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    arrivals = arrival_times(kind, rate, n, rng, burst=draw(st.integers(2, max_burst)))
    arrivals, outputs = without_lulls(arrivals, draw(output_lengths(n, mean)), mean,
                                      capacity_calls_per_s(2048, mean))
    fields: dict = {"controller": controller, "seed": draw(st.integers(0, 1000)),
                    "arrivals_s": arrivals, "output_tokens": mean,
                    "output_tokens_each": outputs}
    agents = draw(st.integers(0, max_agents))
    if agents:
        span = arrivals[-1] - arrivals[0]
        starts = sorted(draw(st.lists(st.floats(arrivals[0] + 0.25 * span, arrivals[-1]),
                                      min_size=agents, max_size=agents)))
        fields.update(agent_sessions=agents, agent_starts_s=tuple(starts),
                      agent_max_tokens=agent_max_tokens,
                      agent_calls=draw(st.integers(2, 12)),
                      agent_seed=draw(st.integers(0, 10_000)),
                      think_scale=draw(st.sampled_from(think_scales)))
    losses = ()
    if lose_decode_worker and draw(st.booleans()):
        losses = ((draw(st.floats(0.0, arrivals[-1])), "decode", 1),)
    fields.update(lose_workers=losses,
                  storage_slowdown=draw(st.sampled_from(storage_slowdowns)),
                  observation_lag_s=round(draw(st.floats(*lag_s)), 2),
                  predictor_error=round(draw(st.floats(*predictor_error)), 2))
    return Scenario(**fields)
