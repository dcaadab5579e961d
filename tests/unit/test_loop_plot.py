"""The loop drawn (issue 37, item 3): each policy's declared open loop evaluated as its
docstring writes it in closed form, the report's page with the loop beside the measured
spectrum."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.run.loop_plot import loop_png, loop_view
from orchestrator.run.settings import LoadOptions, RunSettings, prepare, run_replay
from orchestrator.run.summary import pipeline_s
from traces import sample_path


@pytest.fixture(scope="module")
def runs():
    out = {}
    for name in ("retire", "buffered", "local"):
        settings = RunSettings(load=LoadOptions(max_sessions=6), seed=1, controller=name)
        out[name] = run_replay(prepare([sample_path()], "auto", settings), settings)
    return out


def test_retire_open_loop_is_a_delayed_integrator_over_the_period(runs):
    """L(s) = e^{-(lag + D) s} / (T s): gain 1 / (T w), phase -90 deg - (lag + D) w."""
    result, summary = runs["retire"]
    view = loop_view("retire", result, summary)
    T, lag = result.control.fast_period_s, result.control.observation_lag_s
    delay = lag + pipeline_s(result)
    w = 2 * math.pi * view.freq_hz
    np.testing.assert_allclose(np.abs(view.open_loop), 1.0 / (T * w), rtol=1e-9)
    expected = -math.pi / 2 - delay * w
    wrapped = np.angle(np.exp(1j * (np.angle(view.open_loop) - expected)))
    np.testing.assert_allclose(wrapped, 0.0, atol=1e-9)
    assert view.freq_hz.max() == pytest.approx(0.5 / T)  # up to the sampling Nyquist


def test_buffered_open_loop_is_a_lagged_gain_on_the_backlogs_ewma(runs):
    """L(s) = g / (tau s (1 + tau s)) e^{-lag s}: the pipeline adds no delay."""
    result, summary = runs["buffered"]
    view = loop_view("buffered", result, summary)
    c = result.control
    s = 2j * math.pi * view.freq_hz
    expected = c.backlog_gain / (c.backlog_ewma_s * s * (1 + c.backlog_ewma_s * s)) * np.exp(
        -c.observation_lag_s * s)
    np.testing.assert_allclose(view.open_loop, expected, rtol=1e-9)


def test_a_policy_without_a_model_has_its_spectrum_only_and_the_page_draws(runs):
    views = [loop_view(name, *runs[name]) for name in runs]
    local = views[-1]
    assert local.open_loop is None and local.predicted_period_s is None
    for v in views:
        assert v.measured_period_s == runs[v.name][1]["control"]["ringing_period_s"]["measured"]
    png = loop_png(views)
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
