"""Pareto frontiers of a sweep: goodput in the load window (more is better) against p99
TTFT, p99 TPOT and energy per call (less is better), as a CSV of the frontier rows and
PNGs. The load window's goodput, not the whole run's: at recorded think times the drain
after the last session start lasts simulated hours and the whole-run average says more
about it than about the load (docs/metrics.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from costmodel.pareto import pareto_mask
from orchestrator.sweeps.store import write_table

GOODPUT = "goodput.window.output_tokens_per_s"
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

    from costmodel import plotstyle

    plotstyle.apply()
    x, y = _column(rows, cost), _column(rows, GOODPUT)
    ok = np.isfinite(x) & np.isfinite(y)
    # Points in their controller's colour (the same as in every other plot): filled on the
    # frontier, hollow when dominated.
    names = [str(r.get("controller", "")) for r in rows]
    colours = plotstyle.Colours(sorted({n for n in names if n}))
    fig, ax = plt.subplots(figsize=(9, 6))
    for name in dict.fromkeys(names):
        mine = np.array([n == name for n in names])
        colour = colours.colour(name) if name else plotstyle.BLUE
        ax.scatter(x[ok & mine & ~mask], y[ok & mine & ~mask], s=30, facecolors="none",
                   edgecolors=colour, linewidths=1.0)
        ax.scatter(x[ok & mine & mask], y[ok & mine & mask], s=40, color=colour, zorder=3,
                   label=name or None)
    front = np.flatnonzero(mask)
    front = front[np.argsort(x[front], kind="stable")]
    if front.size:
        ax.step(x[front], y[front], where="post", color=plotstyle.GREY, lw=1.2, zorder=2)
        same: dict[tuple[float, float], list[int]] = {}
        for i in front:
            same.setdefault((x[i], y[i]), []).append(int(i))
        for (px, py), group in list(same.items())[:20]:  # at most 20 labels: legibility
            more = f" (+{len(group) - 1} alike)" if len(group) > 1 else ""
            right_half = px > np.nanmean(x[front])
            ax.annotate(_label(rows[group[0]], varying) + more, (px, py), fontsize=8,
                        xytext=(-4 if right_half else 4, 4), textcoords="offset points",
                        ha="right" if right_half else "left")
    finite = x[ok]
    log_x = finite.size and finite.min() > 0 and finite.max() / finite.min() > 100
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(f"{label}  (less is better)")
    ax.set_ylabel("goodput in the load window, output tokens/s  (more is better)")
    ax.set_title(f"Sweep: goodput against {label}, {int(ok.sum())} points, "
                 f"{front.size} on the frontier (filled)")
    ax.grid(True, alpha=0.3)
    if any(names):
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), title="controller")
    if log_x:
        plotstyle.log_ticks(ax.xaxis)
    tmp = path.with_name(f".{path.name}.tmp.png")  # renamed into place once complete
    plotstyle.save(fig, tmp, format="png")
    plt.close(fig)
    tmp.replace(path)
