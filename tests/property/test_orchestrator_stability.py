"""Stability of buffered admission under sub-capacity load (docs/metrics.md states the bound).

For arrivals whose offered load stays below 90% of the cluster's predicted capacity,
every buffer (admission queue, fill queues and batches, ready buffer) stays at or below

    bound = ceil(B*) + A(L + 2T)

where B* = mu * (D + R) is the controller's backlog target (mu the predicted decode rate in
calls/s, D the predicted fill latency, R the ready-buffer time), L the observation lag, T the
fast-loop period and A(w) the most calls that arrive within any w seconds. Every call
completes exactly once.
"""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.model import load_model
from costmodel.phase import Phase
from orchestrator.config import ControlConfig
from orchestrator.policies import make_policy
from orchestrator.replay import Orchestrator
from tests.factories import single_call_sessions, small_cluster
from traces.replay import LoadOptions
from workers.clock import VirtualClock
from workers.pricing import StepPricer

LLAMA = load_model("llama-3.1-70b")
CONTROL = ControlConfig(realloc_enabled=False)
INPUT, OUTPUT = 2048, 64


def capacity_calls_per_s():
    """The cost core's capacity for these calls: the slower of fill and decode."""
    bound = small_cluster().bind(LLAMA)
    fill = sum(1.0 / StepPricer(LLAMA, w.hardware, w.layout).fill_s(Phase.PREFILL, 1, INPUT, 0)[1]
               for w in bound.workers if w.phase is Phase.PREFILL)
    decode = 0.0
    for w in bound.workers:
        if w.phase is Phase.DECODE:
            p = StepPricer(LLAMA, w.hardware, w.layout)
            slots = w.batch.target_batch * p.attention_ranks
            decode += slots / p.decode_steps_s(slots, INPUT + OUTPUT, OUTPUT - 1).sum()
    return min(fill, decode), decode


CAPACITY, DECODE_RATE = capacity_calls_per_s()


@st.composite
def arrivals(draw):
    """Poisson or bursty arrivals at 10-90% of capacity."""
    load = draw(st.floats(0.1, 0.9)) * CAPACITY
    n = draw(st.integers(5, 40))
    burst = draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    gaps = rng.exponential(burst / load, math.ceil(n / burst))
    times = np.repeat(np.cumsum(gaps), burst)[:n]
    return times.tolist()


def most_in_window(times, width_s):
    t = np.sort(np.asarray(times))
    return int(max(np.searchsorted(t, t + width_s, side="right") - np.arange(len(t))))


@settings(max_examples=int(__import__("os").environ.get("STABILITY_EXAMPLES", 25)))
@given(arrivals())
def test_buffered_keeps_buffers_bounded_and_completes_every_call(times):
    sessions = single_call_sessions(times, INPUT, OUTPUT)
    orch = Orchestrator(small_cluster().bind(LLAMA), sessions,
                        make_policy("buffered", CONTROL, 4), CONTROL, LoadOptions(), seed=0)
    result = VirtualClock().run(orch.run())
    assert result.counters["completed"] == len(times)
    assert len({r.call_id for r in result.requests}) == len(times)
    fill_s = orch.predictor.fill_latency_s(orch.runtime)
    target = orch.predictor.decode_calls_per_s(orch.runtime) * (fill_s + CONTROL.ready_buffer_s)
    lag_window = CONTROL.observation_lag_s + 2 * CONTROL.fast_period_s
    bound = math.ceil(target) + most_in_window(times, lag_window)
    s = result.series
    for name in ("admission_queue", "backlog", "ready_depth"):
        worst = max(getattr(s, name))
        at = s.time_s[getattr(s, name).index(worst)]
        assert worst <= bound, f"{name} reached {worst} > bound {bound} at {at:.1f} s"
