"""`admit-all`: no admission control, every queued call released at once
(orchestrator.control.policies.admit_all)."""

from orchestrator.control.config import ControlConfig
from orchestrator.control.observe import Observation
from orchestrator.control.policies.admit_all import AdmitAllAdmission
from orchestrator.control.policies.base import AdmissionReason, loop_model_of
from orchestrator.plugins import load_policy


def obs(queued: int) -> Observation:
    return Observation(time_s=3.0, admission_queue=queued, admission_queue_interactive=queued,
                       fill_queue=0, fill_running=0, ready_depth=40, decode_loading=0,
                       decode_running=32, decode_slots=32, admitted_total=0, retired_total=0,
                       completed_total=0, rejected_total=0, predicted_decode_calls_per_s=1.0,
                       predicted_fill_latency_s=1.0)


def test_it_releases_every_queued_call_whatever_decode_holds():
    policy = AdmitAllAdmission(ControlConfig(observation_lag_s=5.0))
    d = policy.decide(obs(17), 8.0)  # decode full, 40 calls ready: released all the same
    assert (d.admit, d.reason) == (17, AdmissionReason.ADMIT_ALL)
    assert d.pool_limits is None and d.background_limit is None
    assert policy.decide(obs(0), 8.0).reason is AdmissionReason.HOLD
    assert policy.decide(None, 0.0).admit == 0


def test_it_decides_at_every_event_and_declares_no_loop():
    config = ControlConfig()
    policy = AdmitAllAdmission(config)
    assert policy.event_driven is True
    assert loop_model_of(policy, config) is None
    assert policy.skip_idle(obs(3), 1.0, 10) == policy.decide(obs(3), 1.0)


def test_it_is_registered_by_name():
    policy = load_policy("admit-all", ControlConfig())
    assert type(policy) is AdmitAllAdmission and policy.name == "admit-all"
