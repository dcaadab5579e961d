"""Generated sessions against the real collection: marginals close in the KS sense."""

import numpy as np
import pytest
from scipy.stats import ks_2samp

from tests.conftest import TRACE_DATA
from traces import read_sessions
from traces.synth import generate


def marginals(sessions):
    calls = [c for s in sessions for c in s.calls]
    return {
        name: np.array([getattr(c, name) for c in calls], dtype=float)
        for name in ("new_tokens", "output_tokens", "cached_tokens")
    }


@pytest.fixture(scope="module")
def real():
    """The collection's marginals, read once for the three seeds."""
    return marginals(read_sessions(TRACE_DATA / "weka-cc-dev"))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_generated_marginals_are_close_to_the_real_sets(seed, real):
    synth = marginals(generate(600, np.random.default_rng(seed)))
    for name in real:
        statistic = ks_2samp(real[name], synth[name]).statistic
        assert statistic < 0.1, (name, statistic)
