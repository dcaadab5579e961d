import pytest

from orchestrator.control.config import ControlConfig
from orchestrator.control.stability import phase_margin_deg


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
