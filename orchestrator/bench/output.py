"""A benchmark's files: the points as CSV, the frontier as CSV, the plot, the JSON.

`points.csv` has one row per point, nested figures flattened with dots (`ttft_s.p99`);
`frontier.csv` the frontier's points; `frontier.png` total tokens/s per GPU against
interactivity, one colour per layout family (aggregated, disaggregated; with MTP on,
dashed), each family's points and its own frontier, and the overall frontier in black;
`bench.json` what `--json` prints. The caller writes them into a directory that appears
whole or not at all (`orchestrator.run.output.run_dir`).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from orchestrator.bench.frontier import FRONTIER_KEYS, frontier_mask

# Okabe and Ito's colour-blind-safe palette (https://jfly.uni-koeln.de/color/): blue,
# vermillion, bluish green, orange.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#E69F00")
FILES = ("points.csv", "frontier.csv", "frontier.png", "bench.json")


def flat(point: dict, prefix: str = "") -> dict:
    """A point's fields with nested ones as dotted columns, lists as `a;b`."""
    out = {}
    for key, value in point.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out |= flat(value, f"{name}.")
        elif isinstance(value, list | tuple):
            out[name] = ";".join(repr(v) for v in value)
        else:
            out[name] = value
    return out


def write_csv(path: Path, rows: list[dict]) -> None:
    flats = [flat(r) for r in rows]
    columns = list(dict.fromkeys(k for r in flats for k in r))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in flats:
            writer.writerow({k: "" if r.get(k) is None else r.get(k) for k in columns})


def series_of(point: dict) -> str:
    return point["family"] + (" + MTP" if point["mtp"] else "")


def write_plot(path: Path, points: list[dict], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.0, 6.0), dpi=120)
    names = sorted({series_of(p) for p in points})
    for i, name in enumerate(names):
        mine = [p for p in points if series_of(p) == name and p["interactivity"]]
        if not mine:
            continue
        colour, dashed = PALETTE[i % len(PALETTE)], "MTP" in name
        x = np.array([p["interactivity"] for p in mine])
        y = np.array([p["total_tokens_per_s_per_gpu"] for p in mine])
        ax.scatter(x, y, s=22, color=colour, alpha=0.35, edgecolors="none")
        on = frontier_mask(mine)
        order = np.argsort(x[on])
        ax.plot(x[on][order], y[on][order], marker="o", markersize=5, linewidth=2.0,
                color=colour, linestyle="--" if dashed else "-", label=f"{name} frontier")
    on = frontier_mask(points)
    if on.any():
        x = np.array([points[i]["interactivity"] for i in np.flatnonzero(on)])
        y = np.array([points[i]["total_tokens_per_s_per_gpu"] for i in np.flatnonzero(on)])
        order = np.argsort(x)
        ax.plot(x[order], y[order], color="black", linewidth=1.0, linestyle=":",
                label="overall frontier")
    ax.set_xlabel("interactivity: output tokens/s per user (1 / mean TPOT)", fontsize=11)
    ax.set_ylabel("total (input + output) tokens/s per GPU", fontsize=11)
    ax.set_title(title, fontsize=12)
    ax.grid(True, alpha=0.3)
    ax.tick_params(labelsize=10)
    ax.legend(fontsize=10, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_outputs(directory: Path, result: dict, title: str) -> None:
    """`points.csv`, `frontier.csv`, `frontier.png` and `bench.json` into `directory`."""
    write_csv(directory / "points.csv", result["points"])
    write_csv(directory / "frontier.csv", [{k: p[k] for k in FRONTIER_KEYS}
                                           for p in result["frontier"]])
    write_plot(directory / "frontier.png", result["points"], title)
    (directory / "bench.json").write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
