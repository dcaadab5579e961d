"""MTP: tokens per decode step from per-position acceptance, drawn and expected."""

import numpy as np
import pytest

from costmodel.efficiency import Efficiency
from costmodel.errors import CostModelError
from costmodel.model import load_model
from costmodel.mtp import (
    DEEPSEEK_V3_ACCEPTANCE,
    default_mtp,
    draw_tokens_per_step,
    expected_tokens_per_step,
)


def test_expectation_is_one_plus_the_chained_products():
    p = (0.9, 0.5, 0.2)
    got = expected_tokens_per_step(np.array([0, 1, 2, 3, 5]), p)
    # Past the last position the last probability repeats.
    five = 1 + 0.9 + 0.45 + 0.09 + 0.018 + 0.0036
    assert got == pytest.approx([1.0, 1.9, 2.35, 2.44, five], rel=1e-12)
    assert expected_tokens_per_step(0) == 1.0


def test_sourced_default_first_position_and_three_drafts():
    # Position 1 at DeepSeek-V3's 85% (arXiv 2412.19437); three drafts within 0.1 of
    # TensorRT-LLM's 2.82 measured on DeepSeek-R1.
    assert DEEPSEEK_V3_ACCEPTANCE[0] == 0.85
    assert expected_tokens_per_step(1) == pytest.approx(1.85)
    assert abs(expected_tokens_per_step(3) - 2.82) < 0.1
    # More drafts never yield fewer tokens, and each adds less than the one before.
    means = expected_tokens_per_step(np.arange(8))
    gains = np.diff(means)
    assert np.all(gains > 0) and np.all(np.diff(gains) < 0)


@pytest.mark.parametrize("mtp", [1, 3, 6])
def test_mean_of_many_draws_matches_the_expectation(mtp):
    draws = draw_tokens_per_step(np.random.default_rng(7), mtp, 200_000)
    assert draws.dtype.kind == "i" and draws.min() >= 1 and draws.max() <= 1 + mtp
    # Standard error of the mean is under 0.003 here; 0.01 is > 3 sigma.
    assert abs(draws.mean() - expected_tokens_per_step(mtp)) < 0.01


def test_draws_stop_at_the_first_rejection():
    # Position 2 never accepted: no step can yield more than two tokens, whatever follows.
    draws = draw_tokens_per_step(np.random.default_rng(3), 4, 50_000, probs=(0.8, 0.0, 1.0))
    assert set(np.unique(draws)) == {1, 2}
    assert abs(np.mean(draws == 2) - 0.8) < 0.01


def test_draws_are_deterministic_for_a_seed_and_broadcast_mtp():
    a = draw_tokens_per_step(np.random.default_rng(11), [0, 1, 3], (1000, 3))
    b = draw_tokens_per_step(np.random.default_rng(11), [0, 1, 3], (1000, 3))
    c = draw_tokens_per_step(np.random.default_rng(12), [0, 1, 3], (1000, 3))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert a.shape == (1000, 3)
    assert np.all(a[:, 0] == 1) and a[:, 1].max() == 2 and a[:, 2].max() == 4
    assert np.array_equal(draw_tokens_per_step(np.random.default_rng(0), 0, 5), np.ones(5))


@pytest.mark.parametrize("bad", [-1, 1.5])
def test_bad_draft_counts_are_refused(bad):
    with pytest.raises(ValueError, match="mtp"):
        expected_tokens_per_step(bad)


def test_default_mtp_is_one_draft_per_shipped_module():
    assert default_mtp(load_model("deepseek-v3")) == 1
    assert default_mtp(load_model("kimi-k3-like")) == 0
    assert default_mtp(load_model("kimi-k2")) == 0


@pytest.mark.parametrize("probs", [(), (0.5, 1.2), (float("nan"),), 0.85])
def test_efficiency_refuses_bad_acceptance(probs):
    with pytest.raises(CostModelError, match="mtp_acceptance"):
        Efficiency(mtp_acceptance=probs)
