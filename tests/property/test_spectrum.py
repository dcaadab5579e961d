"""The numpy Welch spectrum gives scipy.signal.welch's floats, bit for bit."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.run.spectrum import hann_periodic, welch

signal = pytest.importorskip("scipy.signal")

samples = st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=16, max_size=700)


def _same(x: np.ndarray, fs: float, nperseg: int) -> None:
    f0, p0 = signal.welch(x, fs=fs, nperseg=nperseg)
    f1, p1 = welch(x, fs, nperseg)
    assert f1.tobytes() == f0.tobytes()
    assert p1.tobytes() == p0.tobytes()


@settings(max_examples=100, deadline=None)
@given(samples, st.sampled_from([1.0, 0.5, 2.0, 1 / 3, 10.0]), st.integers(1, 300))
def test_welch_is_scipys_to_the_bit(values, fs, nperseg):
    x = np.array(values)
    x -= x.mean()  # as the summary hands it over
    _same(x, fs, min(nperseg, len(x)))


@pytest.mark.parametrize("n", [16, 17, 255, 256, 257, 1000, 1001])
def test_welch_on_an_impulse_and_a_step(n):
    # Flat spectra: the peak is decided by rounding alone, so the bits must agree.
    impulse = np.zeros(n)
    impulse[n // 3] = 1.0
    step = np.where(np.arange(n) < n // 2, 0.0, 1.0)
    for x in (impulse - impulse.mean(), step - step.mean()):
        _same(x, 1.0, min(256, n))


def test_hann_periodic_is_scipys():
    windows = pytest.importorskip("scipy.signal.windows")
    for n in (0, 1, 2, 3, 16, 255, 256):
        assert hann_periodic(n).tobytes() == windows.hann(n, sym=False).tobytes()


def test_welch_refuses_a_segment_longer_than_the_signal():
    with pytest.raises(ValueError, match="nperseg"):
        welch(np.zeros(10), 1.0, 11)
