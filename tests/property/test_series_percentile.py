"""The series' per-period percentiles are numpy's, bit for bit."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.run.series import QUANTILES, percentile

values = st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=1,
                  max_size=40)


@given(values, st.sampled_from([*QUANTILES, 0, 25, 100, 33.3]))
def test_percentile_equals_numpys_linear_method(xs, q):
    assert percentile(sorted(xs), q) == float(np.percentile(np.asarray(xs), q))
