"""Interpolation over measured kernel tables, the way aiconfigurator reads them.

Three shapes of table, each read by one rule (aiconfigurator-core 0.12's
``perf_database/perf_interp.rs`` resolver, re-derived here on numpy arrays):

- a 1-D curve (MoE over tokens, collectives over message size): linear between
  points; past either end the boundary utilisation (SOL / measured) is held and
  the speed-of-light model carries the growth;
- scattered sites with a curve each (GEMM: (n, k) sites, each with an m sweep):
  a collected site answers from its own curve; an uncollected one takes the
  utilisation of its nearest covering sites (log2 distance, inverse-square
  weights, at most 4 within 2 octaves);
- a grid (attention, MLA): nested bracket-and-blend, seq blended in sqrt space
  for prefill (~seq^2 work), a ragged corner dropped and the survivor rescaled by
  the SOL ratio, and past the collected frontier a utilisation taken from the 4
  nearest points in log2 space (tapered Shepard weights).

Every function answers for an array of queries at once; a query nothing can
anchor comes back NaN (the caller turns that into "not covered").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SolFn = Callable[..., np.ndarray]


def curve_query(
    xs: np.ndarray, ys: np.ndarray, q: np.ndarray, sol: Callable[[np.ndarray], np.ndarray],
    k_tail: int = 1,
) -> np.ndarray:
    """Latency on a sorted 1-D curve at ``q``; beyond the ends hold the boundary util."""
    q = np.atleast_1d(np.asarray(q, dtype=float))
    out = np.interp(q, xs, ys)
    lo, hi = q < xs[0], q > xs[-1]
    for mask, tail in ((lo, slice(0, k_tail)), (hi, slice(max(len(xs) - k_tail, 0), None))):
        if mask.any():
            util = np.median(sol(xs[tail]) / ys[tail])
            out[mask] = sol(q[mask]) / util
    if len(xs) < 2:
        out[~(lo | hi)] = ys[0]
    return out


@dataclass(frozen=True)
class SiteCurves:
    """GEMM-style table: per site (n, k) a sweep of latency over m."""

    site_n: np.ndarray  # (S,)
    site_k: np.ndarray  # (S,)
    curve_x: tuple[np.ndarray, ...]  # per site, sorted m
    curve_y: tuple[np.ndarray, ...]  # per site, latency_s
    nn_sites: int = 4
    max_site_distance: float = 2.0
    k_tail: int = 3

    def site_index(self, n: int, k: int) -> int | None:
        hit = np.flatnonzero((self.site_n == n) & (self.site_k == k))
        return int(hit[0]) if hit.size else None

    def query(self, m: np.ndarray, n: int, k: int, sol: SolFn) -> np.ndarray:
        """Latency at (m, n, k) for an array of m; NaN where no site anchors it."""
        m = np.atleast_1d(np.asarray(m, dtype=float))
        own = self.site_index(n, k)
        if own is not None:
            return curve_query(self.curve_x[own], self.curve_y[own], m,
                               lambda x: sol(x, n, k), self.k_tail)
        dist = np.hypot(np.log2(self.site_n) - np.log2(max(n, 1e-12)),
                        np.log2(self.site_k) - np.log2(max(k, 1e-12)))
        order = np.argsort(dist, kind="stable")
        lo = np.array([self.curve_x[i][0] for i in order])
        hi = np.array([self.curve_x[i][-1] for i in order])
        covers = (lo[:, None] <= m[None, :]) & (m[None, :] <= hi[:, None])
        # Nothing covers m: every site is a candidate (each held at its own end).
        eligible = np.where(covers.any(axis=0)[None, :], covers, True)
        gated = eligible & (dist[order] <= self.max_site_distance)[:, None]
        rank = np.cumsum(gated, axis=0)
        chosen = gated & (rank <= self.nn_sites)
        util_acc = np.zeros_like(m)
        w_acc = np.zeros_like(m)
        for row in np.flatnonzero(chosen.any(axis=1)):
            i = order[row]
            cols = chosen[row]
            sn, sk = int(self.site_n[i]), int(self.site_k[i])
            lat = curve_query(self.curve_x[i], self.curve_y[i], m[cols],
                              lambda x, sn=sn, sk=sk: sol(x, sn, sk), self.k_tail)
            w = 1.0 / (dist[i] ** 2 + 1e-12)
            util_acc[cols] += w * sol(m[cols], sn, sk) / lat
            w_acc[cols] += w
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(w_acc > 0, sol(m, n, k) / (util_acc / np.where(w_acc > 0, w_acc, 1)),
                            np.nan)


@dataclass(frozen=True)
class Grid3:
    """Dense 3-axis table, NaN where nothing was measured (the ragged corners)."""

    axes: tuple[np.ndarray, np.ndarray, np.ndarray]
    values: np.ndarray  # latency_s, shape (len(a0), len(a1), len(a2))
    sqrt_axis: int | None = None  # the axis blended in sqrt space
    nn_leaves: int = 4

    def query(self, c0, c1, c2, sol: SolFn) -> np.ndarray:
        """Latency at each (c0, c1, c2); arrays broadcast together."""
        c0, c1, c2 = np.broadcast_arrays(*(np.atleast_1d(np.asarray(c, dtype=float)) for c in (c0, c1, c2)))
        shape = c0.shape
        coords = np.stack([c0.ravel(), c1.ravel(), c2.ravel()], axis=1)
        out = self._fast(coords)
        todo = np.flatnonzero(np.isnan(out))
        for i in todo:
            value = self._nested(coords[i], 0, (), sol)
            out[i] = value if value is not None and np.isfinite(value) else np.nan
        held = todo[np.isnan(out[todo])]
        if held.size:
            out[held] = self._hold(coords[held], sol)
        return out.reshape(shape)

    def _fast(self, coords: np.ndarray) -> np.ndarray:
        """Trilinear blend where all eight corners were measured, else NaN."""
        idx, wts, inside = [], [], np.ones(len(coords), dtype=bool)
        for d, axis in enumerate(self.axes):
            c = coords[:, d]
            inside &= (c >= axis[0]) & (c <= axis[-1])
            if len(axis) == 1:
                idx.append(np.zeros(len(c), dtype=int))
                wts.append(np.zeros(len(c)))
                continue
            j = np.clip(np.searchsorted(axis, c, side="right") - 1, 0, len(axis) - 2)
            idx.append(j)
            wts.append((c - axis[j]) / (axis[j + 1] - axis[j]))
        hi = [np.minimum(j + 1, len(a) - 1) for j, a in zip(idx, self.axes, strict=True)]
        v = self.values
        # Blend the innermost axis first, as the nested resolver does.
        def lerp(a, b, w, d):
            if d == self.sqrt_axis:
                return (np.sqrt(a) + (np.sqrt(b) - np.sqrt(a)) * w) ** 2
            return a + (b - a) * w
        corners = {}
        for b0 in (0, 1):
            for b1 in (0, 1):
                i0 = (idx[0], hi[0])[b0]
                i1 = (idx[1], hi[1])[b1]
                corners[b0, b1] = lerp(v[i0, i1, idx[2]], v[i0, i1, hi[2]], wts[2], 2)
        e0 = lerp(corners[0, 0], corners[0, 1], wts[1], 1)
        e1 = lerp(corners[1, 0], corners[1, 1], wts[1], 1)
        out = lerp(e0, e1, wts[0], 0)
        exact = self._exact(coords)
        out = np.where(np.isnan(exact), out, exact)
        return np.where(inside | ~np.isnan(exact), out, np.nan)

    def _exact(self, coords: np.ndarray) -> np.ndarray:
        out = np.full(len(coords), np.nan)
        pos = []
        ok = np.ones(len(coords), dtype=bool)
        for d, axis in enumerate(self.axes):
            j = np.clip(np.searchsorted(axis, coords[:, d]), 0, len(axis) - 1)
            ok &= axis[j] == coords[:, d]
            pos.append(j)
        out[ok] = self.values[pos[0][ok], pos[1][ok], pos[2][ok]]
        return out

    def _nested(self, c, depth, fixed, sol):
        """Scalar nested bracket-and-blend; None when out of range or unmeasured."""
        if depth == 3:
            v = self.values[fixed]
            return None if np.isnan(v) else float(v)
        axis = self.axes[depth]
        x = c[depth]
        hit = np.flatnonzero(axis == x)
        if hit.size:
            return self._nested(c, depth + 1, (*fixed, int(hit[0])), sol)
        if x < axis[0] or x > axis[-1]:
            return None
        j = int(np.searchsorted(axis, x)) - 1
        lo = self._nested(c, depth + 1, (*fixed, j), sol)
        hi = self._nested(c, depth + 1, (*fixed, j + 1), sol)
        if lo is None and hi is None:
            return None
        if lo is None or hi is None:
            # Ragged corner: keep the survivor and hold its util along this axis.
            k, v = (j, lo) if hi is None else (j + 1, hi)
            snapped = np.array(c, dtype=float)
            snapped[depth] = axis[k]
            s_q, s_s = float(sol(*c)), float(sol(*snapped))
            return v * s_q / s_s if s_q > 0 and s_s > 0 else v
        w = (x - axis[j]) / (axis[j + 1] - axis[j])
        if depth == self.sqrt_axis:
            return (np.sqrt(lo) + (np.sqrt(hi) - np.sqrt(lo)) * w) ** 2
        return lo + (hi - lo) * w

    def _hold(self, coords: np.ndarray, sol: SolFn, chunk: int = 512) -> np.ndarray:
        """Past the frontier: util from the nearest measured points (tapered Shepard),
        for an (n, 3) array of queries at once."""
        grids = np.meshgrid(*self.axes, indexing="ij")
        have = ~np.isnan(self.values)
        pts = np.stack([g[have] for g in grids], axis=1)
        lat = self.values[have]
        if not len(lat):
            return np.full(len(coords), np.nan)
        log_pts = np.log2(np.maximum(pts, 1e-12))
        util_pts = sol(pts[:, 0], pts[:, 1], pts[:, 2]) / lat
        k = self.nn_leaves
        out = np.empty(len(coords))
        for start in range(0, len(coords), chunk):
            c = coords[start:start + chunk]
            d = np.sqrt(((log_pts[None, :, :] - np.log2(np.maximum(c, 1e-12))[:, None, :]) ** 2)
                        .sum(axis=2))
            order = _nearest(d, k + 1)
            pick = order[:, :k]
            dp = np.take_along_axis(d, pick, axis=1)
            if len(lat) > k:
                radius = np.take_along_axis(d, order[:, k:k + 1], axis=1)
                w = (np.maximum(radius - dp, 0.0) / (radius * dp + 1e-12)) ** 2
            else:
                w = 1.0 / (dp**2 + 1e-12)
            w = np.where(w.sum(axis=1, keepdims=True) <= 0, 1.0, w)
            util = util_pts[pick]
            out[start:start + chunk] = sol(c[:, 0], c[:, 1], c[:, 2]) / (
                np.sum(w * util, axis=1) / np.sum(w, axis=1))
        return out


def _nearest(d: np.ndarray, n: int) -> np.ndarray:
    """Per row, the indices of the `n` smallest distances in a stable argsort's order (ties
    by index), without sorting whole rows: `np.argsort(d, axis=1, kind="stable")[:, :n]`."""
    if d.shape[1] <= n:
        return np.argsort(d, axis=1, kind="stable")
    nth = np.partition(d, n - 1, axis=1)[:, n - 1:n]
    tied = (d <= nth).sum(axis=1) > n  # more candidates than places: a tie at the edge
    part = np.argpartition(d, n - 1, axis=1)[:, :n]
    # Sort each row's candidates by (distance, index): the stable order.
    keys = np.take_along_axis(d, part, axis=1)
    rows = np.lexsort((part, keys), axis=1)
    out = np.take_along_axis(part, rows, axis=1)
    if tied.any():
        out[tied] = np.argsort(d[tied], axis=1, kind="stable")[:, :n]
    return out
