"""Pure control cores: configuration refusals, admission policies, router."""

import pytest

from orchestrator.control.config import ControlConfig, ControlConfigError, TimeScales
from orchestrator.control.observe import Observation, ObservationLag
from orchestrator.control.policies import AdmissionDecision, AdmissionReason, make_policy
from orchestrator.control.policies.base import AdmissionPolicy
from orchestrator.control.router import FillCandidate, choose_fill_worker


def obs(t=10.0, running=4, slots=8, loading=0, ready=0, fill_queue=0, fill_running=0,
        retired=0, rate=2.0, fill_s=1.0, queue=10):
    return Observation(
        time_s=t, admission_queue=queue, admission_queue_interactive=queue,
        fill_queue=fill_queue, fill_running=fill_running, ready_depth=ready,
        decode_loading=loading, decode_running=running, decode_slots=slots,
        admitted_total=0, retired_total=retired, completed_total=retired, rejected_total=0,
        predicted_decode_calls_per_s=rate, predicted_fill_latency_s=fill_s)


def test_fast_loop_must_be_10x_faster_than_slow_loop():
    with pytest.raises(ControlConfigError, match=r"fast loop \(10 s\) must be at least 10x "
                                                 r"shorter than the slow loop \(60 s\): it is "
                                                 r"only 6x"):
        ControlConfig(scales=TimeScales(admission_s=10.0, reconfiguration_s=60.0))


def test_batch_changes_may_not_outpace_feedback():
    with pytest.raises(ControlConfigError, match=r"batch changes every 2 s outpace the feedback "
                                                 r"time constant of 3 s"):
        ControlConfig(observation_lag_s=2.0, batch_change_interval_s=2.0)


def test_bad_numbers_are_refused_by_name():
    with pytest.raises(ControlConfigError, match="observation_lag_s: expected a finite number"):
        ControlConfig(observation_lag_s=-1)


def test_unknown_controller_lists_known():
    with pytest.raises(ValueError, match="unknown controller 'pid'; known: admit-all, "
                                         "binding, buffered, local, predictive, retire"):
        make_policy("pid", ControlConfig())


@pytest.mark.parametrize("name", ["retire", "buffered", "predictive", "local"])
def test_builtins_implement_the_interface(name):
    policy = make_policy(name, ControlConfig())
    assert isinstance(policy, AdmissionPolicy)
    d = policy.decide(None, 0.0)
    assert (d.admit, d.reason) == (0, AdmissionReason.NO_OBSERVATION)


def test_retire_admits_the_free_slots_it_sees_and_ignores_the_pipeline():
    retire = make_policy("retire", ControlConfig())
    d = retire.decide(obs(running=3, slots=8, fill_running=20), 10.0)
    assert d.admit == 5 and d.reason is AdmissionReason.RETALIATION
    # The same freed slots, seen again next period, are admitted into again.
    assert retire.decide(obs(t=11.0, running=3, slots=8, fill_running=25), 11.0).admit == 5
    assert retire.decide(obs(t=12.0, running=8, slots=8), 12.0).reason is AdmissionReason.HOLD
    d = retire.decide(obs(t=13.0, running=6, slots=8, retired=2), 13.0)
    assert (d.admit, d.reason) == (2, AdmissionReason.RETIREMENTS)


def test_buffered_admits_at_the_predicted_rate_when_backlog_is_on_target():
    cfg = ControlConfig()
    buffered = make_policy("buffered", cfg)
    target = 2.0 * (1.0 + cfg.ready_buffer_s)  # rate x (fill latency + ready buffer)
    admitted = 0
    for i in range(100):
        d = buffered.decide(obs(t=float(i), fill_running=int(target)), float(i))
        admitted += d.admit
    assert d.reason is AdmissionReason.RATE_MATCH
    assert admitted == pytest.approx(2.0 * 100, abs=2)


def test_buffered_holds_back_when_backlog_is_high_and_reserves_for_interactive():
    buffered = make_policy("buffered", ControlConfig())
    decisions = [buffered.decide(obs(t=float(i), ready=200), float(i)) for i in range(30)]
    assert decisions[-1].reason is AdmissionReason.BACKLOG_HIGH
    assert sum(d.admit for d in decisions[10:]) == 0
    d = make_policy("buffered", ControlConfig()).decide(obs(ready=0), 0.0)
    assert d.background_limit is not None and d.background_limit <= 0.8 * d.admit


def test_predictive_sets_a_rejection_threshold():
    cfg = ControlConfig(ttft_target_s=5.0, reject_factor=2.0)
    d = make_policy("predictive", cfg).decide(obs(), 0.0)
    assert d.reject_ttft_above_s == 10.0


def test_decisions_refuse_wrong_shapes():
    with pytest.raises(ValueError, match="admit: expected an integer >= 0"):
        AdmissionDecision(-1, AdmissionReason.HOLD)
    with pytest.raises(ValueError, match="reason: expected an AdmissionReason"):
        AdmissionDecision(1, "because")


def test_observation_lag_delivers_the_old_snapshot():
    lag = ObservationLag(2.0)
    for t in range(6):
        lag.record(obs(t=float(t), running=t))
        seen = lag.seen_at(float(t))
        assert (seen is None) if t < 2 else (seen.decode_running == t - 2)


def test_router_prefers_midfill_for_long_prefixes_and_local_nodes():
    cands = [FillCandidate("prefill-0", "prefill", "n0", 0, True),
             FillCandidate("midfill-0", "midfill", "n0", 5000, True),
             FillCandidate("midfill-1", "midfill", "n1", 9000, True)]
    assert choose_fill_worker(100, cands, frozenset()) == "prefill-0"
    assert choose_fill_worker(50_000, cands, frozenset()) == "midfill-0"
    assert choose_fill_worker(50_000, cands, frozenset({"n1"})) == "midfill-1"
    closed = [FillCandidate(c.name, c.phase, c.node, 0, False) for c in cands]
    assert choose_fill_worker(100, closed, frozenset()) is None


def test_router_leaves_a_local_node_whose_queue_is_out_of_balance():
    # Host memory on n0 holds the prefix; its worker's queue is 40,000 tokens beyond the
    # shortest (over BALANCE_ABS_TOKENS and over BALANCE_REL times it): the shortest wins.
    cands = [FillCandidate("prefill-0", "prefill", "n0", 40_000, True),
             FillCandidate("prefill-1", "prefill", "n1", 0, True)]
    assert choose_fill_worker(100, cands, frozenset({"n0"})) == "prefill-1"
    # Within balance (30,000 beyond), the node holding the prefix still takes the call.
    near = [FillCandidate("prefill-0", "prefill", "n0", 30_000, True), cands[1]]
    assert choose_fill_worker(100, near, frozenset({"n0"})) == "prefill-0"
