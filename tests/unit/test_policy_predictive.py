"""`predictive`: `smith`'s delay-compensated admission (its Smith predictor, not a copy)
plus early rejection, its queue's wait predicted at decode's predicted completion rate."""

import pytest

from orchestrator.control.config import ControlConfig
from orchestrator.control.policies.base import AdmissionDecision, AdmissionReason
from orchestrator.control.policies.predictive import PredictiveAdmission
from orchestrator.control.policies.smith import SmithAdmission
from tests.unit.test_policy_smith import obs


def test_predictive_admits_what_smith_admits_from_the_same_lagged_views_and_log():
    config = ControlConfig(observation_lag_s=5.0, ttft_target_s=5.0, reject_factor=2.0)
    predictive, smith = PredictiveAdmission(config), SmithAdmission(config)
    assert predictive.decides_on_arrival
    admitted = 0
    # 8 decoding at t=0 (2 calls/s at 10 slots), seen late; each policy told the same
    # admissions as they happen.
    for now in (2.0, 2.5, 3.5, 6.0, 9.0, 20.0):
        views = obs(t=max(0.0, now - 5.0), running=8, admitted=0)
        d, s = predictive.decide(views, now), smith.decide(views, now)
        assert (d.admit, d.reason) == (s.admit, s.reason)
        assert d.reject_ttft_above_s == 10.0
        # The queue drains at decode's predicted completions: 2 calls/s, as corrected.
        assert d.release_rate_per_s == pytest.approx(2.0 * smith.estimate.correction)
        admitted += d.admit
        predictive.on_admitted(admitted, now)
        smith.on_admitted(admitted, now)
    assert admitted > 0
    d = PredictiveAdmission(config).decide(None, 0.0)
    assert d.reason is AdmissionReason.NO_OBSERVATION and d.reject_ttft_above_s == 10.0


def test_a_release_rate_that_is_not_a_positive_number_is_refused():
    for bad in (0.0, -1.0, float("nan"), float("inf"), True, "2"):
        with pytest.raises(ValueError, match="release_rate_per_s: expected calls a second"):
            AdmissionDecision(0, AdmissionReason.HOLD, release_rate_per_s=bad)
    assert AdmissionDecision(0, AdmissionReason.HOLD, release_rate_per_s=3).release_rate_per_s == 3
