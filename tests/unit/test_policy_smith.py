"""`smith`: the Smith predictor of the present (orchestrator.control.compensate) and the
policy that admits on it (orchestrator.control.policies.smith). Figures worked by hand
in each test's comments."""

import math

import pytest

from costmodel.model import load_model
from orchestrator.control.compensate import (
    CORRECTION_BOUNDS,
    PresentEstimate,
    completions_predicted,
)
from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation
from orchestrator.control.policies.base import AdmissionReason, loop_model_of
from orchestrator.control.policies.smith import SmithAdmission
from orchestrator.control.stability import phase_margin_deg, ringing_period_s
from orchestrator.run.replay import Orchestrator
from orchestrator.run.summary import summarize
from tests.factories import short_agent_sessions, small_cluster
from traces.replay import LoadOptions
from workers.clock import VirtualClock


def obs(t=0.0, running=8, slots=10, fill_queue=0, ready=0, admitted=0, completed=0,
        rate=2.0, fill_s=1.0):
    return Observation(time_s=t, admission_queue=50, admission_queue_interactive=50,
                       fill_queue=fill_queue, fill_running=0, ready_depth=ready,
                       decode_loading=0, decode_running=running, decode_slots=slots,
                       admitted_total=admitted, retired_total=completed,
                       completed_total=completed, rejected_total=0,
                       predicted_decode_calls_per_s=rate, predicted_fill_latency_s=fill_s)


def test_completions_predicted_each_call_in_decode_memoryless_at_the_models_rate():
    # 2 calls/s at 10 slots: a call's decode takes 5 s on average. 8 decoding from t=0:
    # by t=5, 8 x (1 - e^-1) = 5.057 completed.
    o = obs(t=0.0, running=8)
    assert completions_predicted(o, 5.0) == pytest.approx(8 * (1 - math.exp(-1)))
    # 3 being filled join decode a fill (1 s) later: 3 x (1 - e^-0.8) more.
    o3 = obs(t=0.0, running=8, fill_queue=3)
    assert completions_predicted(o3, 5.0) == pytest.approx(
        8 * (1 - math.exp(-1)) + 3 * (1 - math.exp(-0.8)))
    # 4 admitted at t=2 join at t=3: 4 x (1 - e^-0.4) more; none before they join.
    assert completions_predicted(o, 5.0, [(2.0, 4)]) - completions_predicted(o, 5.0) == (
        pytest.approx(4 * (1 - math.exp(-0.4))))
    assert completions_predicted(o, 2.5, [(2.0, 4)]) == completions_predicted(o, 2.5)
    # Half the rate: a 10 s mean.
    assert completions_predicted(o, 5.0, correction=0.5) == pytest.approx(
        8 * (1 - math.exp(-0.5)))
    # Never more than decode's rate over the span: 30 filled, 0.5 s, at most 1 call.
    assert completions_predicted(obs(t=0.0, running=10, ready=20), 0.5) == pytest.approx(1.0)
    assert completions_predicted(o, 0.0) == 0.0


def test_the_present_is_the_observation_plus_admissions_since_less_predicted_completions():
    est = PresentEstimate()
    est.admitted(100, 5.0)
    est.admitted(104, 11.0)
    o = obs(t=10.0, running=8, fill_queue=3, admitted=100)
    # 11 in the system at t=10, 4 admitted since (at t=11: in decode at 12, none done by
    # 12); completed by t=12: 8 x (1 - e^-0.4) + 3 x (1 - e^-0.2) (the 3 in decode at 11).
    gone = 8 * (1 - math.exp(-0.4)) + 3 * (1 - math.exp(-0.2))
    assert est.present_in_system(o, 12.0) == pytest.approx(11 + 4 - gone)
    # Only what the counter says came after the observation is counted: the log's entry
    # at t=5 is before it.
    assert est.present_in_system(obs(t=10.0, running=8, fill_queue=3, admitted=102),
                                 10.0) == pytest.approx(13.0)


def test_the_correction_learns_measured_over_predicted_completions_from_lagged_pairs():
    est = PresentEstimate()
    assert est.correction == 1.0  # nothing seen yet
    # The model predicts 8 x (1 - e^-0.2) = 1.45 completions a second; the service does
    # half that.
    per_s = 0.5 * 8 * (1 - math.exp(-0.2))
    completed = 0.0
    for k in range(200):
        est.observe(obs(t=float(k), completed=round(completed)))
        completed += per_s
    assert est.correction == pytest.approx(0.5, abs=0.03)
    # An observation that is not newer teaches nothing.
    before = est.correction
    est.observe(obs(t=10.0, completed=10_000))
    assert est.correction == before


def test_the_correction_is_bounded():
    est = PresentEstimate()
    for k in range(100):
        est.observe(obs(t=float(k), completed=100 * k))  # 100 a second against 1.45
    assert est.correction == CORRECTION_BOUNDS[1]


def test_calls_in_fill_are_those_seen_there_and_since_less_the_measured_drain():
    est = PresentEstimate()
    est.admitted(100, 5.0)
    est.admitted(104, 11.0)
    o = obs(t=10.0, running=8, fill_queue=3, admitted=100)  # a fill takes 1 s
    # No drain measured yet: the model's view, those seen there plus the admissions of
    # the last fill latency (admitted at 11: still in fill at 11.5, filled by 12).
    assert est.fill_rate == 0.0
    assert est.in_fill(o, 11.5) == 3 + 4
    assert est.in_fill(o, 12.5) == 3
    # Two observations a second apart: 2 more calls had left fill (into decode).
    est = PresentEstimate()
    est.observe(obs(t=8.0, running=4))
    est.observe(obs(t=9.0, running=6))
    assert est.fill_rate == 2.0
    est.admitted(100, 9.5)
    est.admitted(104, 11.0)
    # At 11.5: 3 + 4 - 2 x 1.5 = 4, and the 4 admitted within the last fill latency
    # cannot be filled yet: 4. At 12.5: 7 - 5 = 2. At 20: none.
    assert est.in_fill(o, 11.5) == 4
    assert est.in_fill(o, 12.5) == 2
    assert est.in_fill(o, 20.0) == 0
    # Calls completing without decode left fill too (completed_total counts them).
    est = PresentEstimate()
    est.observe(obs(t=0.0, running=4, completed=10))
    est.observe(obs(t=2.0, running=4, completed=16))
    assert est.fill_rate == 3.0


def test_smith_admits_the_room_left_under_its_target_and_its_fill_bound():
    policy = SmithAdmission(ControlConfig(observation_lag_s=5.0), cushion_s=2.0)
    assert policy.decide(None, 0.0).reason is AdmissionReason.NO_OBSERVATION
    # Target: 10 slots + 2 calls/s x 2 s cushion = 14 in the system; at most 2 x 2 = 4
    # being filled. 10 decoding and 4 filled at the observation: at its target.
    assert policy.decide(obs(t=0.0, running=10, ready=4), 0.0).reason is AdmissionReason.HOLD
    # 8 decoding at t=0, seen at t=2: 8 - 8 x (1 - e^-0.4) = 5.36 left, room for 8 under
    # the target, but only 4 may be in fill.
    d = policy.decide(obs(t=0.0, running=8), 2.0)
    assert (d.admit, d.reason) == (4, AdmissionReason.PREDICTED_ROOM)
    # Told it admitted those 4: they are in fill for a fill latency (1 s): hold.
    policy.on_admitted(4, 2.0)
    assert policy.decide(obs(t=0.0, running=8), 2.0).reason is AdmissionReason.HOLD
    assert policy.decide(obs(t=0.0, running=8), 2.9).reason is AdmissionReason.HOLD
    # At 3.5 they are filled (the model's view: no drain measured yet); the system holds
    # 12 - 8 x (1 - e^-0.7) - 4 x (1 - e^-0.1) = 7.59: room for 6 under the target, 4 in
    # fill.
    assert policy.decide(obs(t=0.0, running=8), 3.5).admit == 4
    # Nearly all decoded by t=20 and 4 filled: 14 - (4 + 8 e^-4 ...) leaves 9 under the
    # target, 4 by the fill bound.
    assert policy.decide(obs(t=0.0, running=8), 20.0).admit == 4
    # A later observation shows them out of fill (against the first one seen, 10 decoding
    # and 4 ready: 2 more completed, 12 decoding, 4 ready: 4 a second left fill), and none
    # admitted since: none in fill, the fill bound is the whole cushion.
    later = obs(t=1.0, running=12, ready=4, completed=2, admitted=4)
    policy.decide(later, 3.5)
    assert policy.estimate.fill_rate == 4.0
    assert policy.estimate.in_fill(later, 3.5) == 0
    assert policy.fill_room(later, 3.5) == pytest.approx(policy.service_rate(later) * 2.0)


def test_smith_declares_a_loop_without_the_lag():
    config = ControlConfig(observation_lag_s=5.0)
    model = loop_model_of(SmithAdmission(config), config)
    assert model.delay_s == 0.0 and not model.through_pipeline
    # An integrator with no delay: 90 degrees of margin and no ringing, at any pipeline.
    assert phase_margin_deg(model, 3.0) == pytest.approx(90.0, abs=0.5)
    assert ringing_period_s(model, 3.0) is None


def test_a_bad_cushion_is_refused_in_one_line():
    with pytest.raises(ValueError, match="cushion_s: expected seconds >= 0, got -1"):
        SmithAdmission(ControlConfig(), cushion_s=-1.0)


def run(policy, control):
    orch = Orchestrator(small_cluster().bind(load_model("llama-3.1-70b")),
                        short_agent_sessions(30, 6, seed=5), policy, control,
                        LoadOptions(sessions_per_hour=36_000), 1)
    return summarize(VirtualClock().run(orch.run()), control.ttft_target_s,
                     control.tpot_target_s)


def test_under_load_with_a_lag_it_loses_nothing_and_is_told_every_admission():
    control = ControlConfig(realloc_enabled=False, observation_lag_s=5.0)
    policy = SmithAdmission(control)
    s = run(policy, control)
    assert s["requests"]["lost"] == 0
    assert s["requests"]["completed"] == s["requests"]["submitted"] > 0
    # The shell told it the admissions counter after every release: the last is the total.
    assert policy.estimate._admitted_total == s["requests"]["submitted"]
