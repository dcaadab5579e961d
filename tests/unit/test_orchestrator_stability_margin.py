import pytest

from orchestrator.control.config import ControlConfig
from orchestrator.control.stability import phase_margin_deg, ringing_period_s


def test_retire_loop_has_negative_phase_margin_with_lag():
    assert phase_margin_deg("retire", ControlConfig(), fill_latency_s=1.0) < 0


def test_buffered_loop_has_a_healthy_margin_that_lag_erodes():
    healthy = phase_margin_deg("buffered", ControlConfig(), 1.0)
    lagged = phase_margin_deg("buffered", ControlConfig(observation_lag_s=20.0,
                                                        batch_change_interval_s=30.0), 1.0)
    assert healthy > 45 and lagged < healthy


def test_retire_margin_without_delay_is_90_degrees():
    cfg = ControlConfig(observation_lag_s=0.0)
    assert phase_margin_deg("retire", cfg, 0.0) == pytest.approx(90.0, abs=1e-6)


def test_no_model_for_unknown_controllers():
    with pytest.raises(ValueError, match="no linear model"):
        phase_margin_deg("mine", ControlConfig(), 1.0)


@pytest.mark.parametrize("lag_s, pipeline_s", [(1.0, 1.0), (2.0, 1.0), (5.0, 0.05), (5.0, 3.0)])
def test_retire_rings_at_four_times_its_loop_delay(lag_s, pipeline_s):
    """An integrator behind a pure delay crosses -180 degrees where the delay adds 90:
    omega = pi / (2 delay), a period of 4 x (lag + pipeline)."""
    cfg = ControlConfig(observation_lag_s=lag_s)
    assert ringing_period_s("retire", cfg, pipeline_s) == pytest.approx(4 * (lag_s + pipeline_s),
                                                                      rel=1e-3)


def test_retire_without_delay_is_not_predicted_to_ring():
    assert ringing_period_s("retire", ControlConfig(observation_lag_s=0.0), 0.05) is None


def test_buffered_rings_only_once_lag_erodes_its_damping():
    assert ringing_period_s("buffered", ControlConfig(observation_lag_s=0.0), 1.0) is None
    slow = ringing_period_s("buffered", ControlConfig(observation_lag_s=5.0), 1.0)
    assert slow is not None and 40.0 < slow < 80.0  # ~57 s, far slower than retire's ~24 s
