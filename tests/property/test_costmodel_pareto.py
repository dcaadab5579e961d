import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from costmodel.pareto import pareto_mask, pareto_mask_grouped


def brute_force(lat, thr):
    n = len(lat)
    out = []
    for i in range(n):
        if not (np.isfinite(lat[i]) and np.isfinite(thr[i])):
            out.append(False)
            continue
        dominated = any(
            np.isfinite(lat[j]) and np.isfinite(thr[j])
            and lat[j] <= lat[i] and thr[j] >= thr[i] and (lat[j] < lat[i] or thr[j] > thr[i])
            for j in range(n)
        )
        out.append(not dominated)
    return out


# Small integer-valued coordinates make ties (the hard case) common.
coords = st.one_of(st.integers(0, 6).map(float), st.just(float("nan")),
                   st.floats(0, 10, allow_nan=False))
points = st.lists(st.tuples(coords, coords), max_size=40)


@given(points)
def test_matches_brute_force(pts):
    lat = np.array([p[0] for p in pts], dtype=float)
    thr = np.array([p[1] for p in pts], dtype=float)
    assert pareto_mask(lat, thr).tolist() == brute_force(lat, thr)


@given(points, st.lists(st.integers(0, 2), min_size=40, max_size=40))
def test_grouped_matches_per_group(pts, labels):
    lat = np.array([p[0] for p in pts], dtype=float)
    thr = np.array([p[1] for p in pts], dtype=float)
    groups = np.array(labels[: len(pts)], dtype=int)
    mask = pareto_mask_grouped(groups, lat, thr)
    for g in set(groups.tolist()):
        rows = np.flatnonzero(groups == g)
        assert mask[rows].tolist() == brute_force(lat[rows], thr[rows])


@given(points)
def test_frontier_is_nonempty_and_monotone(pts):
    lat = np.array([p[0] for p in pts], dtype=float)
    thr = np.array([p[1] for p in pts], dtype=float)
    mask = pareto_mask(lat, thr)
    finite = np.isfinite(lat) & np.isfinite(thr)
    assert mask.any() == finite.any()
    order = np.argsort(lat[mask], kind="stable")
    # Slower frontier points must buy strictly more throughput.
    lat_f, thr_f = lat[mask][order], thr[mask][order]
    assert np.all((np.diff(lat_f) == 0) | (np.diff(thr_f) > 0))
