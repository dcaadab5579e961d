"""The cost core against published deployments: each predicted/measured ratio in [0.67, 1.5]."""

import pytest

from costmodel.validation import CASES, predict


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_prediction_within_a_factor_of_published(case):
    p = predict(case)
    assert 0.67 <= p.ratio <= 1.5, f"{case.name}: predicted/measured = {p.ratio:.2f}"
