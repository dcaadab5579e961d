"""The loop model's frequency response gives scipy.signal.freqresp's floats, bit for bit."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.control.stability import Rational

signal = pytest.importorskip("scipy.signal")

positive = st.floats(1e-3, 1e3, allow_nan=False, allow_infinity=False)


@settings(max_examples=100, deadline=None)
@given(st.lists(positive, min_size=1, max_size=2), st.lists(positive, min_size=1, max_size=3),
       st.booleans(), st.lists(st.floats(1e-6, 1e3), min_size=1, max_size=50))
def test_freqresp_is_scipys_to_the_bit(num, den, integrator, w):
    den = [*den, 0.0] if integrator else den
    _, expected = signal.freqresp(signal.TransferFunction(num, den), w)
    assert Rational.of(num, den).freqresp(w).tobytes() == expected.tobytes()


def test_freqresp_on_the_loops_grid():
    w = np.geomspace(1e-5, np.pi, 4000)
    for num, den in (([1.0], [0.5, 0.0]), ([0.3], [100.0, 10.0, 0.0])):
        _, expected = signal.freqresp(signal.TransferFunction(num, den), w)
        assert Rational.of(num, den).freqresp(w).tobytes() == expected.tobytes()


def test_a_zero_leading_denominator_is_refused():
    with pytest.raises(ValueError, match="leading denominator"):
        Rational.of([1.0], [0.0, 1.0])
