"""Invariants of the phase cost, over random configurations."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from costmodel.hardware import HardwareTable, load_hardware
from costmodel.model import load_model
from costmodel.phase import Configs, Phase, phase_cost

MODEL = load_model("kimi-k3-like")
TABLE = HardwareTable(tuple(load_hardware(n) for n in ("gb200", "b200", "h200")))

configs = st.fixed_dictionaries(
    {
        "phase": st.sampled_from(list(Phase)),
        "batch": st.integers(1, 256),
        "new_tokens": st.integers(1, 32_000),
        "context": st.integers(0, 500_000),
        "pp": st.sampled_from([1, 2, 4, 8]),
        "tp": st.sampled_from([1, 2, 4, 8]),
        "ep": st.sampled_from([1, 2, 4, 8, 16, 32, 64]),
        "precision": st.integers(0, 2),
        "hardware": st.integers(0, 2),
    }
)


@given(st.lists(configs, min_size=1, max_size=20))
def test_vectorised_equals_one_at_a_time(rows):
    cols = {k: [r[k] for r in rows] for k in rows[0]}
    together = phase_cost(MODEL, TABLE, Configs.make(**cols))
    for i, r in enumerate(rows):
        alone = phase_cost(MODEL, TABLE, Configs.make(**r))
        assert alone.step_time_s[0] == together.step_time_s[i]
        assert alone.hbm_bytes_per_gpu[0] == together.hbm_bytes_per_gpu[i]


@given(configs, st.integers(1, 100_000))
def test_more_context_never_makes_a_step_faster_or_smaller(cfg, extra):
    a = phase_cost(MODEL, TABLE, Configs.make(**cfg))
    b = phase_cost(MODEL, TABLE, Configs.make(**{**cfg, "context": cfg["context"] + extra}))
    assert b.step_time_s[0] >= a.step_time_s[0]
    assert b.hbm_bytes_per_gpu[0] >= a.hbm_bytes_per_gpu[0]


@given(configs)
def test_costs_are_finite_and_positive(cfg):
    c = phase_cost(MODEL, TABLE, Configs.make(**cfg))
    for name in ("step_time_s", "tokens_per_s_per_gpu", "energy_j", "hbm_bytes_per_gpu"):
        value = getattr(c, name)[0]
        assert np.isfinite(value) and value > 0, name
    assert c.step_time_s[0] >= c.compute_s[0] * cfg["pp"] * 0.999 / 2  # overlap hides <= half


@given(st.lists(configs, min_size=1, max_size=10))
def test_step_times_alone_equal_the_full_cost(rows):
    from costmodel.phase import step_times

    cols = {k: [r[k] for r in rows] for k in rows[0]}
    cfg = Configs.make(**cols)
    full = phase_cost(MODEL, TABLE, cfg)
    step_s, tpot_s = step_times(MODEL, TABLE, cfg)
    assert np.array_equal(step_s, full.step_time_s) and np.array_equal(tpot_s, full.tpot_s)
