"""The cost core against published measurements, and the calibration of the kernel floor.

Bands (costmodel/validation.py): every case's predicted/measured ratio within
[0.67, 1.5], except the known misses, which must lie outside it (so the docs'
list of misses stays true) and within [0.5, 2.5] (so they cannot get worse
unnoticed). Leave-one-out: `kernel_launch_s` fitted without a case still
predicts each compute-bound case within [0.67, 1.5]. Those are the validation: the
code against measurements (the compute factors come from the kernel tables,
costmodel/calibration.py, not from these cases).

Regression pins, not validation: every ratio docs/costmodel.md prints (shipped,
in-sample, leave-one-out) within 5% of what the code computes, and the fitted
floors it prints within one grid step. They compare the code with its own
earlier output as the docs recorded it: they catch a change that moves the figures
without the docs following, and say nothing of whether the figures are right.
"""

import re
from pathlib import Path

import numpy as np
import pytest

from costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from costmodel.validation import (
    BAND,
    CASES,
    LAUNCH_GRID_S,
    Metric,
    Regime,
    fit_launch,
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
    slow = Efficiency(compute=0.3, compute_moe=0.15, compute_attn_mla=0.2)
    fast = Efficiency(compute=0.5, compute_moe=0.25, compute_attn_mla=0.33)
    assert predict(prefill, fast).ratio / predict(prefill, slow).ratio > 1.4
    assert predict(batch1, fast).ratio / predict(batch1, slow).ratio < 1.05


def test_the_kernel_floor_moves_batch_1_cases_and_barely_moves_prefill():
    prefill = next(c for c in CASES if c.regime is Regime.COMPUTE and c.batch is None
                   and c.tpot_s is None)
    batch1 = next(c for c in CASES if c.regime is Regime.MEMORY_LATENCY and c.batch == 1)
    lo, hi = Efficiency(kernel_launch_s=2e-6), Efficiency(kernel_launch_s=8e-6)
    assert predict(batch1, lo).ratio / predict(batch1, hi).ratio > 1.3
    assert predict(prefill, lo).ratio / predict(prefill, hi).ratio < 1.02


def test_fit_launch_minimises_summed_squared_log_ratio():
    grid = np.array([3e-6, 4e-6, 5e-6])
    # Column 0 is exact at 4 us, column 1 at 5 us: (log 1.25)^2 = 0.05 < (log 0.7)^2 = 0.13.
    ratios = np.array([[0.75, 0.5], [1.0, 0.7], [1.25, 1.0]])
    assert fit_launch(ratios, grid) == 5e-6
    assert fit_launch(ratios[:, :1], grid) == 4e-6


# The rule's 0.25 us steps over the part of LAUNCH_GRID_S where the fits land (4.5-7 us);
# a fit on this window's edge would mean the optimum lies outside it.
NEAR_GRID = LAUNCH_GRID_S[(LAUNCH_GRID_S >= 3e-6 - 1e-12) & (LAUNCH_GRID_S <= 8.5e-6 + 1e-12)]
STEP = 0.25e-6


def test_the_fit_on_latency_bound_cases_is_the_shipped_value():
    latency_bound = [c for c in CASES if c.regime is Regime.MEMORY_LATENCY]
    fitted = fit_launch(ratio_table(latency_bound, grid=NEAR_GRID), NEAR_GRID)
    assert NEAR_GRID[0] < fitted < NEAR_GRID[-1]
    assert fitted == pytest.approx(DEFAULT_EFFICIENCY.kernel_launch_s)


@pytest.fixture(scope="module")
def near_leave_one_out():
    return leave_one_out(grid=NEAR_GRID)


def _check_leave_one_out(grid, result=None):
    all_fit, rows = result or leave_one_out(grid=grid)
    assert len(rows) == len(CASES)
    assert grid[0] < all_fit < grid[-1]
    for r in rows:
        if r.case.regime is Regime.COMPUTE:
            assert BAND[0] <= r.loo_ratio <= BAND[1], f"{r.case.name}: LOO {r.loo_ratio:.2f}"
        # Dropping one case moves the fitted floor by a few grid steps at most.
        assert abs(r.loo_launch_s - all_fit) <= 6 * STEP + 1e-12, r.case.name


def test_leave_one_out_predicts_each_compute_bound_case_within_band(near_leave_one_out):
    _check_leave_one_out(NEAR_GRID, near_leave_one_out)


@pytest.mark.slow
def test_leave_one_out_on_the_full_grid():
    _check_leave_one_out(LAUNCH_GRID_S)


DOCS = Path(__file__).resolve().parents[2] / "docs" / "costmodel.md"
# A row of the two validation tables: | [case](url) notes | measured | shipped |
# in-sample | leave-one-out (its fitted kernel floor, us) |
TABLE_ROW = re.compile(r"^\| \[[^\]]+\]\((https://[^)]+)\)[^|]* \| ([\d,.]+) \| ([\d.]+) \| "
                       r"([\d.]+) \| ([\d.]+) \(([\d.]+)\) \|$")
PIN = 0.05  # a documented ratio may be this far (relative) from the computed one (a pin)


def documented():
    """The validation section of docs/costmodel.md and its table rows, in table order."""
    section = DOCS.read_text().split("## Calibration and validation", 1)[1]
    rows = [m.groups() for line in section.splitlines() if (m := TABLE_ROW.match(line))]
    return section, rows


def test_regression_pin_documented_ratios_within_5_percent_of_the_code(near_leave_one_out):
    """Regression pin, not a validation: the ratios docs/costmodel.md prints are the ones
    the code computes now (to 5%), so the page and the code stay in step. Whether the
    ratios are good is `test_prediction_within_its_band`'s question."""
    _, rows = documented()
    _, computed = near_leave_one_out
    assert len(rows) == len(CASES) == len(computed)
    for (url, measured, *ratios, loo_launch_us), c in zip(rows, computed, strict=True):
        # The tables list the cases in CASES order: the same source and figure.
        assert url == c.case.source, c.case.name
        assert float(measured.replace(",", "")) == pytest.approx(c.case.measured, rel=1e-3)
        for doc, got in zip(map(float, ratios),
                            (c.shipped_ratio, c.in_sample_ratio, c.loo_ratio), strict=True):
            assert abs(got / doc - 1) <= PIN, f"{c.case.name}: docs {doc}, code {got:.3f}"
        assert abs(float(loo_launch_us) * 1e-6 - c.loo_launch_s) <= STEP + 1e-12, c.case.name


def test_regression_pin_documented_fits_and_ranges(near_leave_one_out):
    """Regression pin, not a validation: the fitted floors and the compute-bound range
    the page quotes are the code's."""
    section, _ = documented()
    six = [c for c in CASES if c.regime is Regime.COMPUTE]
    eight = [c for c in CASES if c.regime is Regime.MEMORY_LATENCY]
    fit_all = near_leave_one_out[0]  # on every case
    fit_eight = fit_launch(ratio_table(eight, grid=NEAR_GRID), NEAR_GRID)
    stated = re.search(r"([\d.]+) us on the eight\s+memory/latency-bound cases, ([\d.]+) us"
                       r"\s+on\s+all fourteen", section)
    assert float(stated[1]) * 1e-6 == pytest.approx(fit_eight)
    assert float(stated[2]) * 1e-6 == pytest.approx(fit_all)
    # "all within LO-HIx": true of the shipped ratios on the compute-bound cases, and
    # each end pinned to the computed one.
    lo, hi = map(float, re.search(r"all within ([\d.]+)-([\d.]+)x", section).groups())
    ratios = [predict(c).ratio for c in six]
    assert lo <= min(ratios) and max(ratios) <= hi, (lo, hi, min(ratios), max(ratios))
    assert abs(min(ratios) / lo - 1) <= PIN and abs(max(ratios) / hi - 1) <= PIN
