"""The throughput-interactivity frontier of a benchmark's points, and its JSON.

A point is on the frontier when no other point has at least its interactivity (output
tokens/s per user) and at least its total tokens/s per GPU, and more of one: the curve
the public comparisons draw, across layouts and concurrencies.
"""

from __future__ import annotations

import numpy as np

from costmodel.pareto import pareto_mask

FRONTIER_KEYS = ("interactivity", "total_tokens_per_s_per_gpu", "output_tokens_per_s_per_gpu",
                 "concurrency", "layout", "gpus")


def frontier_mask(points: list[dict]) -> np.ndarray:
    """True where a point is on the frontier; a point without a figure (nothing decoded)
    never is."""
    inter = np.array([p["interactivity"] if p["interactivity"] else np.nan for p in points],
                     dtype=np.float64)
    tput = np.array([p["total_tokens_per_s_per_gpu"] for p in points], dtype=np.float64)
    # Minimise 1 / interactivity (the mean TPOT) against throughput.
    with np.errstate(divide="ignore"):
        return pareto_mask(1.0 / inter, tput)


def frontier(points: list[dict]) -> list[dict]:
    """The frontier's points (FRONTIER_KEYS), from the most interactive to the most
    productive."""
    mask = frontier_mask(points)
    on = [{k: points[i][k] for k in FRONTIER_KEYS} for i in np.flatnonzero(mask)]
    return sorted(on, key=lambda p: (-p["interactivity"], p["total_tokens_per_s_per_gpu"],
                                     p["layout"], p["concurrency"]))


def bench_json(points: list[dict]) -> dict:
    """`--json`'s object: every point, then the frontier."""
    return {"points": points, "frontier": frontier(points)}
