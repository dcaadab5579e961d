"""Pareto frontiers as array programs: minimise latency, maximise throughput.

A point is on the frontier when no other point is at least as fast *and* at
least as productive, and strictly better in one of the two. Sorting by latency
(ties: highest throughput first) and keeping a running maximum of throughput
finds them in O(n log n) without a Python loop over points.
"""

from __future__ import annotations

import numpy as np


def pareto_mask(latency_s, throughput) -> np.ndarray:
    """Bool array: True where (latency_s, throughput) is not dominated.

    Identical points do not dominate each other, so all copies of a frontier point
    are kept. Non-finite points are never on the frontier and dominate nothing."""
    lat = np.asarray(latency_s, dtype=np.float64).ravel()
    thr = np.asarray(throughput, dtype=np.float64).ravel()
    if lat.shape != thr.shape:
        raise ValueError(f"latency_s has {lat.size} points, throughput {thr.size}")
    mask = np.zeros(lat.size, dtype=bool)
    finite = np.flatnonzero(np.isfinite(lat) & np.isfinite(thr))
    if finite.size == 0:
        return mask
    lat_f, thr_f = lat[finite], thr[finite]
    order = np.lexsort((-thr_f, lat_f))
    lat_s, thr_s = lat_f[order], thr_f[order]
    running = np.maximum.accumulate(thr_s)
    idx = np.arange(lat_s.size)
    # First index of each run of equal latency: points there compete only with
    # strictly faster points (before the run) and with the run's best (its first).
    starts = np.maximum.accumulate(np.where(np.r_[True, lat_s[1:] != lat_s[:-1]], idx, 0))
    before = np.where(starts > 0, running[np.maximum(starts - 1, 0)], -np.inf)
    on = (thr_s == thr_s[starts]) & (thr_s > before)
    mask[finite[order]] = on
    return mask


def pareto_mask_grouped(groups, latency_s, throughput) -> np.ndarray:
    """`pareto_mask` applied separately within each group label (e.g. workload x
    hardware). The loop runs over the few groups, never over points."""
    groups = np.asarray(groups).ravel()
    lat = np.asarray(latency_s, dtype=np.float64).ravel()
    thr = np.asarray(throughput, dtype=np.float64).ravel()
    mask = np.zeros(lat.size, dtype=bool)
    for g in np.unique(groups):
        rows = np.flatnonzero(groups == g)
        mask[rows] = pareto_mask(lat[rows], thr[rows])
    return mask
