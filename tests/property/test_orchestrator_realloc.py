"""The slow loop: no move inside the dead band, none faster than the dwell time, and
without hysteresis a dithering demand makes it flap."""

import itertools

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.control.config import ControlConfig
from orchestrator.control.realloc import Reallocator, ReallocReason

POOLS = {"prefill": ("prefill", 3), "midfill": ("midfill", 3), "decode": ("decode", 4)}
CFG = ControlConfig(realloc_threshold=0.3, realloc_dwell_s=300.0)


@given(st.lists(st.floats(-0.3, 0.3, allow_nan=False), min_size=1, max_size=200))
def test_never_reconfigures_inside_the_dead_band(signal):
    r = Reallocator(CFG)
    for i, x in enumerate(signal):
        d = r.decide_on(x, 60.0 * i, POOLS)
        assert d.move is None and d.reason is ReallocReason.DEAD_BAND


@given(st.lists(st.floats(-2.0, 2.0, allow_nan=False), min_size=1, max_size=300),
       st.floats(1.0, 120.0))
def test_never_more_often_than_the_dwell_time(signal, period_s):
    r = Reallocator(CFG)
    moves = [i * period_s for i, x in enumerate(signal)
             if r.decide_on(x, i * period_s, POOLS).move is not None]
    gaps = [b - a for a, b in itertools.pairwise(moves)]
    assert all(g >= CFG.realloc_dwell_s for g in gaps), gaps


def test_without_hysteresis_a_dithering_demand_flaps():
    flappy = Reallocator(ControlConfig(hysteresis=False))
    steady = Reallocator(CFG)
    dither = [0.05 if i % 2 else -0.05 for i in range(20)]
    flaps = [flappy.decide_on(x, 60.0 * i, POOLS) for i, x in enumerate(dither)]
    assert sum(d.move is not None for d in flaps) == 20
    assert {d.reason for d in flaps} == {ReallocReason.TO_DECODE, ReallocReason.TO_FILL}
    assert all(steady.decide_on(x, 60.0 * i, POOLS).move is None for i, x in enumerate(dither))
