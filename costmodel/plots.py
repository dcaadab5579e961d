"""PNG plots of a sweep's frontiers, in the manner of the essay's figures 26-29.

Each figure has one panel per workload (rows: prefill, midfill, decode) and one
line per hardware: the Pareto frontier of tokens/s/GPU against TTFT or TPOT.
The other three views plot a quantity *along* that frontier (x = its latency),
so a reader sees what each frontier point costs in energy, HBM and network.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from costmodel import plotstyle
from costmodel.phase import Phase
from costmodel.sweep import SweepResult

HBM_LINE_GB = 80.0
# One colour-blind-safe colour per hardware line, in the sweep's order (costmodel.plotstyle).
COLORS = (plotstyle.BLUISH_GREEN, plotstyle.BLUE, plotstyle.ORANGE, plotstyle.VERMILLION,
          plotstyle.REDDISH_PURPLE, plotstyle.SKY_BLUE)


@dataclass(frozen=True)
class View:
    file_name: str
    title: str
    y_label: str
    columns: tuple[str, ...]  # plotted along the frontier; several share one panel
    scale: float  # column value -> plotted unit
    log_y: bool


VIEWS = (
    View("frontier_throughput.png", "Throughput vs latency (Pareto frontier)",
         "tokens/s per GPU", ("tokens_per_s_per_gpu",), 1.0, True),
    View("frontier_energy_per_query.png", "Energy per query along the frontier",
         "J per query", ("energy_per_query_j",), 1.0, True),
    View("frontier_hbm_per_gpu.png", "Peak resident HBM per GPU along the frontier",
         "GB per GPU", ("hbm_bytes_per_gpu",), 1e-9, False),
    View("frontier_network_per_gpu.png",
         "Network per GPU along the frontier (solid: scale-up, dashed: scale-out)",
         "GB/s per GPU", ("scale_up_bytes_per_s_per_gpu", "scale_out_bytes_per_s_per_gpu"),
         1e-9, True),
)


def write_plots(result: SweepResult, out_dir: Path) -> list[Path]:
    """Write one PNG per view into `out_dir`; return their paths."""
    import matplotlib

    matplotlib.use("Agg")  # files only: never needs a display
    import matplotlib.pyplot as plt

    plotstyle.apply()
    by_phase = [[i for i, w in enumerate(result.workloads) if w.phase == p] for p in Phase]
    by_phase = [row for row in by_phase if row]
    n_rows, n_cols = len(by_phase), max(len(row) for row in by_phase)
    paths = []
    for view in VIEWS:
        fig, axes = plt.subplots(n_rows, n_cols, figsize=(4.6 * n_cols, 3.6 * n_rows),
                                 squeeze=False)
        for r, row in enumerate(by_phase):
            for col in range(n_cols):
                ax = axes[r][col]
                if col >= len(row):
                    ax.set_visible(False)
                    continue
                _panel(ax, result, row[col], view)
        handles, labels = axes[0][0].get_legend_handles_labels()
        seen: dict = {}
        for label, handle in zip(labels, handles, strict=True):
            seen.setdefault(label, handle)  # the solid (first) line names the hardware
        fig.legend(list(seen.values()), list(seen.keys()), loc="upper right",
                   ncol=len(seen), frameon=False)
        fig.suptitle(view.title, x=0.02, ha="left")
        fig.tight_layout(rect=(0, 0, 1, 0.95))
        for ax in axes.flat:
            if ax.get_visible():
                plotstyle.log_ticks(ax.xaxis)
                if view.log_y:
                    plotstyle.log_ticks(ax.yaxis)
        path = Path(out_dir) / view.file_name
        plotstyle.save(fig, path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


def _panel(ax, result: SweepResult, workload: int, view: View) -> None:
    c = result.columns
    w = result.workloads[workload]
    for h, name in enumerate(result.hardware_names):
        rows = np.flatnonzero((c["workload"] == workload) & (c["hardware"] == h)
                              & c["on_frontier"])
        if not rows.size:
            continue
        rows = rows[np.argsort(c["ttft_or_tpot_s"][rows], kind="stable")]
        x_ms = c["ttft_or_tpot_s"][rows] * 1e3
        for k, column in enumerate(view.columns):
            y = c[column][rows] * view.scale
            if view.log_y:
                y = np.where(y > 0, y, np.nan)  # a zero (no scale-out) has no log
            ax.plot(x_ms, y, marker="o", markersize=3, linewidth=1.4,
                    linestyle="-" if k == 0 else "--", color=COLORS[h % len(COLORS)],
                    label=name)
    if view.file_name == "frontier_hbm_per_gpu.png":
        ax.axhline(HBM_LINE_GB, color="grey", linestyle=":", linewidth=1)
        ax.text(0.01, HBM_LINE_GB, "80 GB", va="bottom", fontsize=9, color="grey",
                transform=ax.get_yaxis_transform())  # x in panel fractions, y in GB
    ax.set_xscale("log")  # ticks: plotstyle.log_ticks, once the panel is drawn
    if view.log_y:
        ax.set_yscale("log")
    latency = "TPOT" if w.phase == Phase.DECODE else "TTFT"
    ax.set_title(w.name)
    ax.set_xlabel(f"{latency} (ms)")
    ax.set_ylabel(view.y_label)
    ax.grid(True, which="major", alpha=0.3)
