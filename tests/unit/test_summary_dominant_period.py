"""The summary's measured oscillation period: the largest peak of the occupancy's Welch
spectrum, checked on signals whose period is known."""

import numpy as np
import pytest

from orchestrator.run.summary import dominant_period_s


@pytest.mark.parametrize("dt_s, samples, period_samples", [
    (1.0, 1024, 32), (0.5, 600, 16), (2.0, 100, 10), (1.0, 256, 64)])
def test_a_sinusoid_on_a_frequency_bin_gives_its_period(dt_s, samples, period_samples):
    """Segments of min(256, n) samples resolve frequencies k / (segment x dt): a sinusoid
    of a whole number of cycles per segment is found exactly."""
    t = np.arange(samples) * dt_s
    period = period_samples * dt_s
    x = 0.6 + 0.1 * np.sin(2 * np.pi * t / period + 0.3)
    assert dominant_period_s(x, dt_s) == pytest.approx(period, rel=1e-12)


@pytest.mark.parametrize("period_s", [13.7, 23.3, 41.0, 90.0])
def test_a_sinusoid_in_noise_is_found_within_half_a_bin(period_s):
    """Off a bin, the peak is the nearest bin: its frequency within half a bin width of
    the sinusoid's, under noise of the sinusoid's amplitude."""
    rng = np.random.default_rng(7)
    dt_s, n = 1.0, 2000
    t = np.arange(n) * dt_s
    x = 0.5 + 0.1 * np.sin(2 * np.pi * t / period_s) + 0.1 * rng.standard_normal(n)
    bin_hz = 1 / (256 * dt_s)
    assert abs(1 / dominant_period_s(x, dt_s) - 1 / period_s) <= bin_hz / 2


def test_a_slow_drift_under_a_fast_ring_leaves_the_ring_the_peak():
    """Each segment's mean is removed: a drift slower than a segment is not the peak."""
    t = np.arange(1500, dtype=float)
    x = 0.5 + 0.2 * t / t[-1] + 0.05 * np.sin(2 * np.pi * t / 16)
    assert dominant_period_s(x, 1.0) == pytest.approx(16.0, rel=1e-12)
