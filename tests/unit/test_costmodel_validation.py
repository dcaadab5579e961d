"""The cost core against published measurements, and the calibration of `compute`.

Bands (costmodel/validation.py): every case's predicted/measured ratio within
[0.67, 1.5], except the known misses, which must lie outside it (so the docs'
list of misses stays true) and within [0.67, 2.5] (so they cannot get worse
unnoticed). Leave-one-out: `compute` fitted without a compute-bound case still
predicts it within [0.67, 1.5].
"""

import numpy as np
import pytest

from costmodel.efficiency import Efficiency
from costmodel.validation import (
    BAND,
    CASES,
    COMPUTE_GRID,
    Metric,
    Regime,
    fit_compute,
    leave_one_out,
    predict,
    ratio_table,
)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_prediction_within_its_band(case):
    p = predict(case)
    lo, hi = case.band
    assert lo <= p.ratio <= hi, f"{case.name}: predicted/measured = {p.ratio:.2f}"
    if case.miss:
        assert not BAND[0] <= p.ratio <= BAND[1], (
            f"{case.name} is listed as a known miss but now predicts {p.ratio:.2f}: "
            "drop its `miss` and its line in docs/costmodel.md")


def test_both_regimes_are_covered_with_sources():
    regimes = [c.regime for c in CASES]
    assert regimes.count(Regime.COMPUTE) >= 6
    assert regimes.count(Regime.MEMORY_LATENCY) >= 4
    assert all(c.source.startswith("https://") for c in CASES)
    small = [c for c in CASES if c.regime is Regime.MEMORY_LATENCY]
    assert all(c.batch is not None and c.batch <= 64 for c in small)


def test_per_user_metric_is_the_inverse_of_the_time_per_token():
    case = next(c for c in CASES if c.metric is Metric.TOKENS_PER_S_PER_USER)
    p = predict(case)
    assert p.predicted == pytest.approx(1.0 / p.tpot_s)


def test_compute_moves_compute_bound_cases_and_barely_moves_latency_bound_ones():
    prefill = next(c for c in CASES if c.regime is Regime.COMPUTE and c.batch is None
                   and c.tpot_s is None)
    batch1 = next(c for c in CASES if c.regime is Regime.MEMORY_LATENCY and c.batch == 1
                  and c.model == "deepseek-v3")
    slow, fast = Efficiency(compute=0.3), Efficiency(compute=0.5)
    assert predict(prefill, fast).ratio / predict(prefill, slow).ratio > 1.4
    assert predict(batch1, fast).ratio / predict(batch1, slow).ratio < 1.05


def test_fit_compute_minimises_summed_squared_log_ratio():
    grid = np.array([0.3, 0.4, 0.5])
    # Column 0 is exact at 0.4, column 1 at 0.5: (log 1.25)^2 = 0.05 < (log 0.7)^2 = 0.13.
    ratios = np.array([[0.75, 0.5], [1.0, 0.7], [1.25, 1.0]])
    assert fit_compute(ratios, grid) == 0.5
    assert fit_compute(ratios[:, :1], grid) == 0.4


# The rule's 0.01 steps over the part of COMPUTE_GRID where the fits land (0.33-0.36);
# a fit on this window's edge would mean the optimum lies outside it.
NEAR_GRID = COMPUTE_GRID[(COMPUTE_GRID >= 0.28) & (COMPUTE_GRID <= 0.45)]


def test_the_fit_on_compute_bound_cases_is_near_the_shipped_value():
    compute_bound = [c for c in CASES if c.regime is Regime.COMPUTE]
    fitted = fit_compute(ratio_table(compute_bound, grid=NEAR_GRID), NEAR_GRID)
    assert NEAR_GRID[0] < fitted < NEAR_GRID[-1]
    assert 0.3 <= fitted <= 0.40


def _check_leave_one_out(grid):
    all_fit, rows = leave_one_out(grid=grid)
    assert len(rows) == len(CASES)
    assert grid[0] < all_fit < grid[-1]
    for r in rows:
        if r.case.regime is Regime.COMPUTE:
            assert BAND[0] <= r.loo_ratio <= BAND[1], f"{r.case.name}: LOO {r.loo_ratio:.2f}"
        # Dropping one case moves the fitted fraction by a grid step or two.
        assert abs(r.loo_compute - all_fit) <= 0.03, r.case.name


def test_leave_one_out_predicts_each_compute_bound_case_within_band():
    _check_leave_one_out(NEAR_GRID)


@pytest.mark.slow
def test_leave_one_out_on_the_full_grid():
    _check_leave_one_out(COMPUTE_GRID)
