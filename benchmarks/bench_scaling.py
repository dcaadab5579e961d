"""How replay cost grows with calls, with sessions and with simulated span.

Three series, each point a replay in its own subprocess (default model and cluster,
controller buffered, 240 sessions an hour unless said):
- sessions: the first 15, 30, 60 and 113 development sessions at real think times
  (calls and simulated span grow with them);
- calls: synthetic agent sessions (`tokenfactory trace synth`, 200 sessions) repeated
  x1, x2, x4, x8, and 1,000 to 10,000 Azure conversation requests open loop on
  examples/clusters/hgx-h100-llama70b.toml (one call per session);
- span: all 113 development sessions with think gaps x0.05, x1 and x4: the same calls and
  sessions over a shorter or longer simulated span.
Prints the table (calls, sessions, simulated s, wall s, peak RSS) and each series' growth
exponent (the slope of log wall s and log peak RSS against log of the series' variable),
and writes a log-log plot to docs/img/replay-scaling.png.

    python benchmarks/bench_scaling.py [--quick] [--png FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_million import base_trace
from benchmarks.replay_runner import (
    AZURE_CONV,
    DEV_TRACES,
    H100_LLAMA_CLUSTER,
    ROOT,
    run_isolated,
    shared_missing,
    spec,
)

PNG = ROOT / "docs" / "img" / "replay-scaling.png"
RATE = 240.0


def points(quick: bool) -> list[tuple[str, str, float, dict]]:
    """(series, label, x, run) for every point."""
    out = []
    for n in (15, 30) if quick else (15, 30, 60, 113):
        out.append(("sessions", f"dev first {n}", n,
                    spec([DEV_TRACES], "weka", sessions_per_hour=RATE, max_sessions=n)))
    synth, _ = base_trace(200)
    for k in (1, 2) if quick else (1, 2, 4, 8):
        out.append(("calls: synthetic agents", f"synth 200 x{k}", 0,
                    spec([synth], "native", sessions_per_hour=RATE, repeat=k)))
    for n in (1000, 2000) if quick else (1000, 2000, 4000, 10000):
        out.append(("calls: open loop", f"azure {n}", 0,
                    spec([AZURE_CONV], "azure", model="llama-3.1-70b",
                         cluster=H100_LLAMA_CLUSTER, max_sessions=n)))
    for scale in (0.05, 1.0) if quick else (0.05, 1.0, 4.0):
        out.append(("span", f"dev think x{scale:g}", 0,
                    spec([DEV_TRACES], "weka", sessions_per_hour=RATE, think_scale=scale)))
    return out


def x_of(series: str, fig: dict) -> float:
    if series == "sessions":
        return fig["sessions"]
    if series == "span":
        return fig["simulated_s"]
    return fig["calls"]


def slope(xs: list[float], ys: list[float]) -> float:
    if len(xs) < 2 or min(xs) <= 0 or min(ys) <= 0:
        return float("nan")
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    colours = {s: f"C{i}" for i, s in enumerate(dict.fromkeys(r["series"] for r in rows))}
    panels = (("calls", "wall s", "replay_s"), ("calls", "peak RSS MB", "peak_rss_mb"),
              ("simulated s", "wall s", "replay_s"))
    for ax, (xlabel, ylabel, key) in zip(axes, panels, strict=True):
        for series in dict.fromkeys(r["series"] for r in rows):
            pts = [r for r in rows if r["series"] == series]
            if xlabel == "simulated s" and series != "span":
                continue  # the span series alone holds calls and sessions fixed
            xs = [r["simulated_s"] if xlabel == "simulated s" else r["calls"] for r in pts]
            ax.loglog(xs, [r[key] for r in pts], "o-", label=series, color=colours[series])
        if key == "replay_s" and xlabel == "calls":  # a line of slope 1: cost per call fixed
            calls = np.array([min(r["calls"] for r in rows), max(r["calls"] for r in rows)])
            ax.loglog(calls, calls / 1000.0, "k--", lw=0.8, label="1,000 calls/s")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    axes[2].set_title("113 dev sessions, think x0.05, x1, x4", fontsize=9)
    span = [r["replay_s"] for r in rows if r["series"] == "span"]
    if span:  # a decade either side, so run-to-run noise does not read as a trend
        axes[2].set_ylim(min(span) / 10, max(span) * 10)
    axes[0].legend(fontsize=8)
    fig.suptitle("replay cost: wall time and peak RSS against calls and simulated span")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two points per series")
    ap.add_argument("--png", type=Path, default=PNG)
    ap.add_argument("--json", action="store_true", help="the rows as JSON at the end")
    ap.add_argument("--rows", type=Path, default=None,
                    help="print and plot the rows of an earlier --json run instead of running")
    args = ap.parse_args()
    missing = shared_missing(DEV_TRACES, AZURE_CONV)
    if missing:
        print(missing)
        return 0
    saved = json.loads(args.rows.read_text()) if args.rows else None
    rows = []
    print(f"{'series':<24} {'point':<18} {'calls':>9} {'sessions':>8} {'simulated s':>12} "
          f"{'wall s':>8} {'calls/s':>8} {'peak RSS MB':>11}")
    for row in saved or ({"series": series, "point": label, **run_isolated(run)}
                         for series, label, _, run in points(args.quick)):
        rows.append(row)
        series, label, fig = row["series"], row["point"], row
        print(f"{series:<24} {label:<18} {fig['calls']:>9,} {fig['sessions']:>8,} "
              f"{fig['simulated_s']:>12,.0f} {fig['replay_s']:>8.1f} "
              f"{fig['calls'] / max(fig['replay_s'], 1e-9):>8,.0f} {fig['peak_rss_mb']:>11,.0f}",
              flush=True)
    print("growth exponents (slope of log y against log x; 1 = proportional):")
    for series in dict.fromkeys(r["series"] for r in rows):
        pts = [r for r in rows if r["series"] == series]
        xs = [x_of(series, r) for r in pts]
        what = {"sessions": "sessions", "span": "simulated s"}.get(series, "calls")
        print(f"  {series:<24} wall s ~ {what}^{slope(xs, [r['replay_s'] for r in pts]):.2f}, "
              f"peak RSS ~ {what}^{slope(xs, [r['peak_rss_mb'] for r in pts]):.2f}")
    plot(rows, args.png)
    print(f"wrote {args.png}")
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
