"""Pareto frontiers of a sweep: goodput (more is better) against p99 TTFT, p99 TPOT
and energy per call (less is better), as a CSV of the frontier rows and PNGs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from costmodel.pareto import pareto_mask
from orchestrator.sweeps.store import write_table

GOODPUT = "goodput.output_tokens_per_s"
# (cost column, file stem, axis label)
FRONTIERS = (
    ("ttft_s.p99", "frontier_ttft_p99", "p99 TTFT (s)"),
    ("tpot_s.p99", "frontier_tpot_p99", "p99 TPOT (s)"),
    ("energy.joules_per_call", "frontier_energy_per_call", "energy per call (J)"),
)


def _column(rows: list[dict[str, Any]], name: str) -> np.ndarray:
    return np.array([np.nan if not isinstance(r.get(name), int | float) else float(r[name])
                     for r in rows], dtype=np.float64)


def frontier_masks(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """One bool array per cost column: the rows no other row beats on both axes.
    Failed points (no summary) are never on a frontier."""
    goodput = _column(rows, GOODPUT)
    return {cost: pareto_mask(_column(rows, cost), goodput) for cost, _, _ in FRONTIERS}


def write_frontiers(out: Path, columns: list[str], rows: list[dict[str, Any]],
                    varying: list[str], plots: bool = True) -> list[str]:
    """`frontiers.csv` (the rows on any frontier, with one flag column per frontier)
    and, with `plots`, one PNG per frontier. Returns the file names written."""
    masks = frontier_masks(rows)
    flags = [f"on_frontier.{cost}" for cost, _, _ in FRONTIERS]
    chosen = []
    for i, row in enumerate(rows):
        marks = {f: bool(masks[cost][i]) for f, (cost, _, _) in zip(flags, FRONTIERS, strict=True)}
        if any(marks.values()):
            chosen.append({**row, **marks})
    write_table(out / "frontiers.csv", [*columns, *flags], chosen)
    files = ["frontiers.csv"]
    if plots:
        for cost, stem, label in FRONTIERS:
            _plot(out / f"{stem}.png", rows, cost, label, masks[cost], varying)
            files.append(f"{stem}.png")
    return files


def _label(row: dict[str, Any], varying: list[str]) -> str:
    return " ".join(f"{k}={row[k]}" for k in varying if k in row)


def _plot(path: Path, rows: list[dict[str, Any]], cost: str, label: str, mask: np.ndarray,
          varying: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x, y = _column(rows, cost), _column(rows, GOODPUT)
    ok = np.isfinite(x) & np.isfinite(y)
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    ax.scatter(x[ok & ~mask], y[ok & ~mask], s=18, color="0.65", label="dominated")
    front = np.flatnonzero(mask)
    front = front[np.argsort(x[front], kind="stable")]
    if front.size:
        ax.step(x[front], y[front], where="post", color="tab:blue", lw=1.2)
        ax.scatter(x[front], y[front], s=28, color="tab:blue", zorder=3, label="frontier")
        same: dict[tuple[float, float], list[int]] = {}
        for i in front:
            same.setdefault((x[i], y[i]), []).append(int(i))
        for (px, py), group in list(same.items())[:20]:  # at most 20 labels: legibility
            more = f" (+{len(group) - 1} alike)" if len(group) > 1 else ""
            right_half = px > np.nanmean(x[front])
            note = ax.annotate(_label(rows[group[0]], varying) + more, (px, py), fontsize=6,
                               xytext=(-3 if right_half else 3, 3), textcoords="offset points",
                               ha="right" if right_half else "left")
            note.set_in_layout(False)  # a long label must not squeeze the axes
    finite = x[ok]
    if finite.size and finite.min() > 0 and finite.max() / finite.min() > 100:
        ax.set_xscale("log")
    ax.set_xlabel(f"{label}  (less is better)")
    ax.set_ylabel("goodput, output tokens/s  (more is better)")
    ax.set_title(f"Sweep: goodput against {label}, {int(ok.sum())} points, "
                 f"{front.size} on the frontier")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")  # renamed into place once complete
    fig.savefig(tmp, format="png")
    plt.close(fig)
    tmp.replace(path)
