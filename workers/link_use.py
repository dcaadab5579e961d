"""A link's bytes carried per utilisation window, and the run's figures from them.

`workers.kv_links.KvLinks` integrates what each busy link carries between the
fabric's events into windows of `window_s` (`LinkUse`); at the end of a run each
link's mean utilisation and its p99 over the windows, idle ones counted as zeros
(`link_utilisation`, `sparse_percentile`).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable

import numpy as np


class LinkUse:
    """One link's bytes carried: in all, and per utilisation window for the windows it
    carried any. Windows come in time order, so a window is either the open one (its sum
    a float here) or a new one after it (the open one then goes to the parallel arrays:
    16 bytes a window, where a dict of them held ~90; a million-call run has ~10^7)."""

    __slots__ = ("acc", "carried", "index", "name", "total", "window")

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.total = 0.0  # bytes carried up to the links' last event
        self.window = -1  # the open window (-1: none yet)
        self.acc = 0.0  # bytes carried in the open window
        self.index = array("q")  # the closed windows, in order
        self.carried = array("d")

    def add(self, window: int, moved: float) -> None:
        """`moved` bytes carried in `window` (the open one or a later one)."""
        if window == self.window:
            self.acc += moved
            return
        if self.window >= 0:
            self.index.append(self.window)
            self.carried.append(self.acc)
        self.window = window
        self.acc = 0.0 + moved

    def windows(self) -> tuple[array, array]:
        """The windows it carried bytes in and the bytes, in window order."""
        index, carried = array("q", self.index), array("d", self.carried)
        if self.window >= 0:
            index.append(self.window)
            carried.append(self.acc)
        return index, carried



def link_utilisation(uses: dict[str, LinkUse], bandwidth: Callable[[str], float],
                     window_s: float, end_s: float) -> dict[str, dict[str, float]]:
    """Per link of `uses` (by name, its bandwidth in bytes per second from
    `bandwidth`): `mean` (bytes carried over bandwidth x `end_s`) and `p99` of its
    utilisation over the run's windows of `window_s` (idle windows count as 0), up to
    `end_s`."""
    out: dict[str, dict[str, float]] = {}
    if end_s <= 0:
        return out
    w = window_s
    n = max(1, math.ceil(end_s / w))
    spans = np.full(n, w)
    spans[-1] = end_s - (n - 1) * w
    spans = np.maximum(spans, 1e-12)
    for name in sorted(uses):
        bw = bandwidth(name)
        index, carried = uses[name].windows()
        windows = np.array(index, dtype=np.int64)
        carried = np.array(carried, dtype=np.float64)
        kept = windows < n
        windows, carried = windows[kept], carried[kept]
        per = np.zeros(n)  # summed as numpy sums the n windows (pairwise)
        per[windows] = carried
        # The other windows' utilisation is 0: the p99 from the windows it carried in.
        util = carried / (bw * spans[windows])
        out[name] = {"mean": float(per.sum() / (bw * end_s)),
                     "p99": sparse_percentile(util, n, 99)}
    return out


def sparse_percentile(values: np.ndarray, n: int, q: int | float) -> float:
    """`np.percentile(a, q)` (its default, linear method) of an `n`-long array `a` that
    holds `values` (all >= 0, finite) and `n - len(values)` zeros, without making `a` or
    partitioning it: the two order statistics around rank (n - 1) q / 100 and numpy's
    interpolation between them, operation for operation (so the same float). A run's
    links are idle in most of its windows: a million-call run has ~500,000 per link."""
    zeros = n - len(values)
    virtual = (n - 1) * (q / 100)
    if virtual >= n - 1:  # numpy takes the largest value
        return float(values.max()) if len(values) else 0.0
    lo = math.floor(virtual)
    gamma = virtual - lo
    if lo + 1 < zeros:
        return 0.0  # both order statistics are idle windows: 0 + (0 - 0) * gamma
    ranked = np.sort(values)
    a = 0.0 if lo < zeros else float(ranked[lo - zeros])
    b = float(ranked[lo + 1 - zeros])
    diff = b - a
    if gamma >= 0.5:
        return b - diff * (1 - gamma)
    return a + diff * gamma
