"""The predictor rounds the typical call's shape (an EWMA that moves a little at every
completion) without calling `round` while the value stays within half a unit of the
last one: the same double as `round`, at every step of any walk."""

import math

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.control.predictor import Rounding

# Token counts as the EWMAs hold them, and at and beyond the rounding's ties and zero.
values = st.one_of(
    st.floats(min_value=-2e6, max_value=2e7, allow_nan=False),
    st.integers(min_value=-40, max_value=40_000).map(lambda k: k * 50.0),  # ties, +-0
    st.sampled_from([0.0, -0.0, 49.99999999999999, 50.0, 150.0, 250.0, 499.99999999999994,
                     500.0, 1500.0, 2500.0, math.inf, -math.inf, math.nan]))
steps = st.floats(min_value=-3000.0, max_value=3000.0, allow_nan=False)


def same(a: float, b: float) -> bool:
    """Equal doubles, zeros' signs and NaNs included."""
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a)
                                                 == math.copysign(1, b))


@given(st.sampled_from([-2, -3]), values, st.lists(st.one_of(steps, values), max_size=60))
def test_rounding_is_round_at_every_step(digits, start, moves):
    rounding = Rounding(digits)
    x = start
    assert same(rounding.of(x), round(x, digits))
    for move in moves:
        x = x + move if abs(move) <= 3000.0 else move  # a small move, or a jump anywhere
        assert same(rounding.of(x), round(x, digits))
