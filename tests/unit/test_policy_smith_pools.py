"""`smith-pools`: `smith` with its fill bound per fill pool, and the shell's release under
per-pool caps (`AdmissionDecision.pool_limits`, policies.base). Figures worked by hand in
each test's comments."""

import math
from collections import deque
from types import SimpleNamespace

import pytest

from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation, PoolObservation
from orchestrator.control.policies.base import (
    AdmissionDecision,
    AdmissionReason,
    DecisionError,
    observed_facts,
)
from orchestrator.control.policies.smith import SmithAdmission, SmithPoolsAdmission
from orchestrator.run.fast_loop import FastLoop
from orchestrator.run.sessions import Pending
from tests.unit.test_policy_smith import run


def obs(t=0.0, running=8, prefill_busy=0.1, midfill_busy=0.9):
    pools = (PoolObservation("prefill", "prefill", 1, 0, 0, 0, prefill_busy),
             PoolObservation("midfill", "midfill", 2, 3, 2, 0, midfill_busy),
             PoolObservation("decode", "decode", 1, 0, running, 10, 0.5))
    return Observation(time_s=t, admission_queue=50, admission_queue_interactive=50,
                       fill_queue=3, fill_running=2, ready_depth=0, decode_loading=0,
                       decode_running=running, decode_slots=10, admitted_total=0,
                       retired_total=0, completed_total=0, rejected_total=0,
                       predicted_decode_calls_per_s=2.0, predicted_fill_latency_s=1.0,
                       pools=pools)


def test_it_caps_only_the_busy_pools_calls_to_the_fill_bound():
    config = ControlConfig(observation_lag_s=5.0)
    pools, smith = SmithPoolsAdmission(config, cushion_s=2.0), SmithAdmission(config, 2.0)
    assert observed_facts(pools) == {"queue_pools"}
    # 8 decoding and 5 in fill at t=0, seen at t=2: 13 - 8 x (1 - e^-0.4) - 5 x
    # (1 - e^-0.2) = 9.46 in the system against 10 + 2 x 2 = 14: room for 4. The fill
    # bound: 2 x 2 = 4 less the 5 seen in fill (none admitted since, no drain measured):
    # none. smith admits the lower, none; smith-pools admits 4, none of them to midfill
    # (busy 0.9), any to prefill (busy 0.1).
    assert smith.decide(obs(), 2.0).reason is AdmissionReason.HOLD
    d = pools.decide(obs(), 2.0)
    assert (d.admit, d.reason, d.pool_limits) == (4, AdmissionReason.PREDICTED_ROOM,
                                                  {"midfill": 0})
    # Every fill pool busy (smoothed over 10 s: 0.1 then 0.9 a period later reads 0.1 +
    # (0.9 - 0.1)(1 - e^-0.1) = 0.18, still idle; from the first sight both busy): smith's.
    busy = SmithPoolsAdmission(config, cushion_s=2.0)
    d = busy.decide(obs(prefill_busy=0.8), 2.0)
    assert d == smith.decide(obs(), 2.0) and d.pool_limits is None
    pools.decide(obs(t=1.0, prefill_busy=0.9), 3.0)
    assert pools.busy["prefill"] == pytest.approx(0.1 + 0.8 * (1 - math.exp(-0.1)))
    assert pools.busy["midfill"] == pytest.approx(0.9)


def test_pool_limits_of_the_wrong_shape_are_refused():
    with pytest.raises(DecisionError, match=r"pool_limits\['midfill'\]: expected an integer"):
        AdmissionDecision(1, AdmissionReason.HOLD, pool_limits={"midfill": -1})
    with pytest.raises(DecisionError, match="pool_limits: expected a dict"):
        AdmissionDecision(1, AdmissionReason.HOLD, pool_limits=[("midfill", 1)])


class Host:
    """The run as the fast loop sees it: calls go to the pool their id names."""

    def __init__(self):
        self.counters = {"admitted": 0}
        self.routed, self.asked = [], []

    def fill_pool(self, pending):
        self.asked.append(pending.request.call_id)
        return pending.request.pool

    def route(self, pending, now_s):
        self.routed.append(pending.request.call_id)
        return True


def test_the_shell_releases_in_order_passing_over_calls_of_a_pool_at_its_cap():
    host = Host()
    calls = [("midfill", "midfill"), ("midfill", "midfill"), ("prefill", "prefill"),
             ("prefill", "midfill"), ("midfill", "midfill"), ("prefill", "prefill")]
    # (the pool on arrival, the pool now): the fourth call's prefix grew meanwhile (an
    # earlier call of its session wrote back).
    queue = deque(Pending(SimpleNamespace(call_id=i, pool=now), None, True, fill_pool=then)
                  for i, (then, now) in enumerate(calls))
    policy = SimpleNamespace(name="p", decide=None)
    loop = FastLoop(queue=queue, runtime=None, policy=policy, series=None,
                    control=ControlConfig(), lag=None, sampler=None, hbm_peak=None,
                    host=host)
    loop._apply(AdmissionDecision(4, AdmissionReason.PREDICTED_ROOM,
                                  pool_limits={"midfill": 1}), 0.0)
    # One midfill call (0); those routed to midfill on arrival then passed over unasked
    # (1, 4); the fourth asked again, now for midfill, passed over; the prefill calls
    # released: 3 of the 4 admitted, the rest left queued in order.
    assert host.routed == [0, 2, 5]
    assert host.asked == [0, 2, 3, 5]
    assert [p.request.call_id for p in queue] == [1, 3, 4]
    assert host.counters["admitted"] == 3


def test_under_load_with_a_lag_it_loses_nothing():
    control = ControlConfig(realloc_enabled=False, observation_lag_s=5.0)
    s = run(SmithPoolsAdmission(control), control)
    assert s["requests"]["lost"] == 0
    assert s["requests"]["completed"] == s["requests"]["submitted"] > 0
