import math
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.control.config import ControlConfig, TimeScales
from orchestrator.control.policies import make_policy
from orchestrator.control.stability import (
    LoopModel,
    LoopModelError,
    phase_margin_deg,
    ringing_period_s,
)


def _model(controller: str, config: ControlConfig) -> LoopModel:
    """The controller's own linearised loop under `config`."""
    return make_policy(controller, config, 4).loop_model(config)


def _margin(controller: str, config: ControlConfig, pipeline_s: float) -> float:
    return phase_margin_deg(_model(controller, config), pipeline_s)


def _ringing(controller: str, config: ControlConfig, pipeline_s: float) -> float | None:
    return ringing_period_s(_model(controller, config), pipeline_s)


def test_retire_loop_has_negative_phase_margin_with_lag():
    assert _margin("retire", ControlConfig(), pipeline_s=1.0) < 0


def test_buffered_loop_has_a_healthy_margin_that_lag_erodes():
    healthy = _margin("buffered", ControlConfig(), 1.0)
    lagged = _margin("buffered", ControlConfig(observation_lag_s=20.0,
                                                        batch_change_interval_s=30.0), 1.0)
    assert healthy > 45 and lagged < healthy


def test_retire_margin_without_delay_is_90_degrees():
    cfg = ControlConfig(observation_lag_s=0.0)
    assert _margin("retire", cfg, 0.0) == pytest.approx(90.0, abs=1e-6)


def test_each_built_in_declares_its_own_model_or_none():
    cfg = ControlConfig()
    assert _model("retire", cfg).through_pipeline and not _model("buffered", cfg).through_pipeline
    assert _model("predictive", cfg) == _model("smith", cfg)  # smith's admission
    assert _model("local", cfg) is None  # event-driven: no periodic loop to linearise


@pytest.mark.parametrize("fields, message", [
    ({"numerator": ()}, "numerator: expected finite numbers"),
    ({"denominator": (float("nan"), 1.0)}, "denominator: expected finite numbers"),
    ({"denominator": (0.0, 1.0)}, "leading coefficient"),
    ({"numerator": (1.0, 2.0, 3.0)}, "not proper"),
    ({"delay_s": -1.0}, "delay_s"),
    ({"period_s": 0.0}, "period_s"),
])
def test_a_loop_model_of_the_wrong_shape_is_refused(fields, message):
    good = {"numerator": (1.0,), "denominator": (1.0, 0.0), "delay_s": 1.0, "period_s": 1.0}
    with pytest.raises(LoopModelError, match=message):
        LoopModel(**{**good, **fields})


@pytest.mark.parametrize("lag_s, pipeline_s", [(1.0, 1.0), (2.0, 1.0), (5.0, 0.05), (5.0, 3.0)])
def test_retire_rings_at_four_times_its_loop_delay(lag_s, pipeline_s):
    """An integrator behind a pure delay crosses -180 degrees where the delay adds 90:
    omega = pi / (2 delay), a period of 4 x (lag + pipeline)."""
    cfg = ControlConfig(observation_lag_s=lag_s)
    assert _ringing("retire", cfg, pipeline_s) == pytest.approx(4 * (lag_s + pipeline_s),
                                                                      rel=1e-3)


def test_retire_without_delay_is_not_predicted_to_ring():
    assert _ringing("retire", ControlConfig(observation_lag_s=0.0), 0.05) is None


def test_buffered_rings_only_once_lag_erodes_its_damping():
    assert _ringing("buffered", ControlConfig(observation_lag_s=0.0), 1.0) is None
    slow = _ringing("buffered", ControlConfig(observation_lag_s=5.0), 1.0)
    assert slow is not None and 40.0 < slow < 80.0  # ~57 s, far slower than retire's ~24 s


# Closed forms of the two loops (module docstring of orchestrator.control.stability):
# the margins and ringing periods the numerical model must find.

def _config(lag_s=2.0, period_s=1.0, tau_s=5.0, gain=0.5):
    return ControlConfig(scales=TimeScales(admission_s=period_s), observation_lag_s=lag_s,
                         backlog_ewma_s=tau_s, backlog_gain=gain,
                         batch_change_interval_s=max(10.0, lag_s + period_s))


@pytest.mark.parametrize("period_s, lag_s, pipeline_s", [(1.0, 2.0, 1.0), (0.5, 0.0, 0.2),
                                                        (4.0, 1.0, 3.0), (2.0, 5.0, 0.05)])
def test_retire_margin_is_90_degrees_less_its_delay_in_periods(period_s, lag_s, pipeline_s):
    """|1 / (jwT)| = 1 at w = 1/T, where the phase is -90 degrees less the delay's
    (lag + pipeline) / T radians."""
    want = 90.0 - math.degrees((lag_s + pipeline_s) / period_s)
    got = _margin("retire", _config(lag_s, period_s), pipeline_s)
    assert got == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("tau_s, gain, lag_s", [(5.0, 0.5, 2.0), (5.0, 4.0, 0.0),
                                                (20.0, 1.0, 8.0), (2.0, 0.1, 1.0)])
def test_buffered_margin_matches_its_closed_form(tau_s, gain, lag_s):
    """|g / (jw tau (1 + jw tau))| = 1 where x = (w tau)^2 solves x^2 + x = g^2; the phase
    there is -90 degrees - atan(w tau) - lag w."""
    x = (math.sqrt(1 + 4 * gain**2) - 1) / 2
    w = math.sqrt(x) / tau_s
    want = 90.0 - math.degrees(math.atan(w * tau_s)) - math.degrees(lag_s * w)
    got = _margin("buffered", _config(lag_s, 1.0, tau_s, gain), 1.0)
    assert got == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("tau_s, gain", [(5.0, 1.0), (5.0, 4.0), (10.0, 2.0)])
def test_buffered_without_lag_rings_at_its_second_order_resonance(tau_s, gain):
    """Without lag the closed loop is g / (tau^2 s^2 + tau s + g): natural frequency
    sqrt(g) / tau, damping 1 / (2 sqrt(g)), resonant peak at wn sqrt(1 - 2 zeta^2). The
    model samples 4,000 frequencies a geometric step of 0.29% apart: the period is found
    to within that."""
    wn, zeta = math.sqrt(gain) / tau_s, 1 / (2 * math.sqrt(gain))
    want = 2 * math.pi / (wn * math.sqrt(1 - 2 * zeta**2))
    got = _ringing("buffered", _config(0.0, 1.0, tau_s, gain), 1.0)
    assert got == pytest.approx(want, rel=3e-3)


def test_buffered_with_a_negative_margin_rings_where_its_phase_is_minus_180():
    """atan(w tau) + lag w = pi / 2 at the phase crossover (solved here by bisection on
    that closed form)."""
    tau_s, gain, lag_s = 5.0, 4.0, 5.0
    config = _config(lag_s, 1.0, tau_s, gain)
    assert _margin("buffered", config, 1.0) < 0
    lo, hi = 1e-6, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if math.atan(mid * tau_s) + lag_s * mid < math.pi / 2 else (lo, mid)
    assert _ringing("buffered", config, 1.0) == pytest.approx(2 * math.pi / lo, rel=1e-9)


def test_scipy_is_imported_when_first_needed_not_with_the_cli():
    code = ("import sys, orchestrator.cli, orchestrator.run.summary, "
            "orchestrator.control.stability; print(any(m.startswith('scipy') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "False"


class _Plain:
    """A third-party controller without the optional `loop_model`."""

    name = "plain"

    def decide(self, obs, now_s):
        raise AssertionError("not called here")


class _Wrong(_Plain):
    def loop_model(self, config):
        return ("not", "a", "model")


class _Broken(_Plain):
    def loop_model(self, config):
        raise ZeroDivisionError("its own bug")


def test_a_policy_without_the_method_has_no_model_and_a_wrong_one_raises():
    from orchestrator.control.policies.base import DecisionError, loop_model_of

    cfg = ControlConfig()
    assert loop_model_of(_Plain(), cfg) is None
    with pytest.raises(DecisionError, match="loop_model: expected a LoopModel or None"):
        loop_model_of(_Wrong(), cfg)
    with pytest.raises(ZeroDivisionError):  # not swallowed as "no model"
        loop_model_of(_Broken(), cfg)
    assert loop_model_of(make_policy("retire", cfg, 4), cfg) == _model("retire", cfg)
