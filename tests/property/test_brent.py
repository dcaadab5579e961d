"""`brent.brentq` finds SciPy's `optimize.brentq` root, bit for bit, and fails as it does."""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from orchestrator.control.brent import brentq
from orchestrator.control.config import ControlConfig, TimeScales
from orchestrator.control.stability import open_loop

optimize = pytest.importorskip("scipy.optimize")

coef = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)


def _same(f, a: float, b: float) -> None:
    try:
        want = optimize.brentq(f, a, b)
    except (ValueError, RuntimeError) as err:
        with pytest.raises(type(err)):
            brentq(f, a, b)
        return
    assert brentq(f, a, b).hex() == float(want).hex()


@settings(max_examples=300, deadline=None)
@given(st.lists(coef, min_size=2, max_size=6), st.floats(-50, 50), st.floats(0.01, 100))
def test_polynomial_roots_match_scipy(coefs, a, width):
    b = a + width

    def f(x: float) -> float:
        return sum(c * x**k for k, c in enumerate(coefs))

    assume(f(a) * f(b) < 0)
    _same(f, a, b)


@settings(max_examples=200, deadline=None)
@given(st.floats(0.1, 30), st.floats(0.5, 120), st.floats(0.05, 5), st.floats(0, 20))
def test_the_stability_models_roots_match_scipy(period, tau, gain, lag):
    # The two functions the stability model solves: log gain, and phase + pi.
    scales = TimeScales(admission_s=period, reconfiguration_s=max(60.0, 10 * period))
    config = ControlConfig(scales=scales, backlog_ewma_s=tau, backlog_gain=gain,
                           observation_lag_s=lag, batch_change_interval_s=lag + period + 1)
    for controller in ("retire", "buffered"):
        tf, delay = open_loop(controller, config, 3.0)
        _same(lambda w, tf=tf: math.log(abs(tf.freqresp([w])[0])), 1e-6, 1e3)
        _same(lambda w, tf=tf, d=delay: float(np.angle(tf.freqresp([w])[0])) - d * w + math.pi,
              1e-3, 10.0)


def test_same_signs_and_exact_zeros_as_scipy():
    _same(lambda x: x * x + 1, -1.0, 1.0)  # no sign change: ValueError
    _same(lambda x: x, 0.0, 1.0)  # a root at the bracket's end
    _same(lambda x: x - 1.0, 0.0, 1.0)
    assert brentq(lambda x: x**3 - 2, 0.0, 2.0) == optimize.brentq(lambda x: x**3 - 2, 0.0, 2.0)
    # Tiny values: the interpolation's denominator underflows to 0; C's quotient is not
    # finite and it bisects, where Python would raise ZeroDivisionError.
    _same(lambda x: 1.8270828052968906e-142 * x, -4.0, 21.0)


def test_no_convergence_is_an_error_as_in_scipy():
    def f(x: float) -> float:
        return x**9 - 0.5

    for fn in (optimize.brentq, brentq):
        with pytest.raises(RuntimeError):
            fn(f, 0.0, 10.0, maxiter=3)
