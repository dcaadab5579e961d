"""Plots and tables of the control sweep's map (docs/control.md) from the `table.csv`
files `tokenfactory sweep-replay` writes for examples/sweeps/control-map.toml (and
control-predictor.toml).

    python examples/sweeps/plot_control_map.py preset-dev=docs/control/preset-dev.csv \
        decode32-dev=docs/control/decode32-dev.csv --img docs/img
    python examples/sweeps/plot_control_map.py preset-dev=DIR --markdown

Per trace set, one PNG (`control-map-<label>.png`): a column per (think scale,
observation lag), a row per figure, offered load on the x axis, a line per
controller. `--markdown` prints the same figures as Markdown tables instead.
"""

from __future__ import annotations

import argparse
import csv
import math
from collections import defaultdict
from pathlib import Path

# (column of table.csv, label, per controller or derived)
FIGURES = (
    ("ratio", "oscillation index\nretire / buffered"),
    ("control.oscillation_index", "oscillation index"),
    ("control.decode_starvation_fraction", "decode starvation"),
    ("control.decode_occupancy_mean", "decode occupancy"),
    ("goodput.output_tokens_per_s", "goodput (tokens/s)"),
    ("ttft_s.p99", "TTFT p99 (s)"),
    ("control.ringing_period_s.measured", "ringing period (s)\nmeasured (line), "
                                          "predicted (dashed)"),
)
COLOURS = {"retire": "tab:red", "buffered": "tab:blue", "local": "tab:green",
           "predictive": "tab:purple"}


def _number(text: str) -> float:
    return float(text) if text not in ("", "None") else math.nan


def read_table(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return [row for row in csv.DictReader(f) if not row.get("error")]


def by_cell(rows: list[dict[str, str]]):
    """{(think, lag): {controller: [(load, row), ...] sorted by load}}."""
    cells: dict = defaultdict(lambda: defaultdict(list))
    for row in rows:
        key = (float(row["think_scale"]), float(row["observation_lag"]))
        cells[key][row["controller"]].append((float(row["load"]), row))
    for per in cells.values():
        for pts in per.values():
            pts.sort(key=lambda p: p[0])
    # A cell an interrupted sweep left without both retire and buffered is left out.
    kept = {k: v for k, v in cells.items() if {"retire", "buffered"} <= set(v)}
    return dict(sorted(kept.items(), key=lambda kv: (-kv[0][0], kv[0][1])))


def ratio(per: dict, load: float) -> float:
    def osc(name: str) -> float:
        for x, row in per.get(name, ()):
            if x == load:
                return _number(row["control.oscillation_index"])
        return math.nan
    r, b = osc("retire"), osc("buffered")
    return r / b if b > 0 else math.nan


def plot(label: str, rows: list[dict[str, str]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = by_cell(rows)
    fig, axes = plt.subplots(len(FIGURES), len(cells), figsize=(3.2 * len(cells), 2.2 *
                             len(FIGURES)), sharex=True, squeeze=False)
    for j, ((think, lag), per) in enumerate(cells.items()):
        axes[0][j].set_title(f"think x{think:g}, lag {lag:g} s", fontsize=9)
        loads = sorted({x for pts in per.values() for x, _ in pts})
        for i, (column, name) in enumerate(FIGURES):
            ax = axes[i][j]
            if column == "ratio":
                ax.plot(loads, [ratio(per, x) for x in loads], "o-", color="black")
                ax.axhline(3.0, color="grey", lw=0.8, ls=":")
                ax.axhline(1.0, color="grey", lw=0.8)
            else:
                for ctl, pts in per.items():
                    xs = [x for x, _ in pts]
                    wide = ctl == "retire"  # drawn wide under the others where they agree
                    ax.plot(xs, [_number(r[column]) for _, r in pts], "o-", ms=3,
                            lw=4 if wide else 1.5, alpha=0.45 if wide else 1.0,
                            color=COLOURS.get(ctl), label=ctl)
                    if column.endswith("measured") and ctl == "retire":
                        ax.plot(xs, [_number(r["control.ringing_period_s.predicted"])
                                     for _, r in pts], "x--", color=COLOURS[ctl])
            if column in ("ttft_s.p99", "control.ringing_period_s.measured"):
                ax.set_yscale("log")
            ax.set_xscale("log", base=2)
            if j == 0:
                ax.set_ylabel(name, fontsize=8)
            ax.tick_params(labelsize=7)
        axes[-1][j].set_xlabel("offered load (x planned capacity)", fontsize=8)
    axes[1][0].legend(fontsize=7)
    fig.suptitle(f"control map: {label}", fontsize=11)
    fig.tight_layout()
    path = out / f"control-map-{label}.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def markdown(label: str, rows: list[dict[str, str]]) -> str:
    lines = [f"### {label}", "",
             "| think | lag s | load | controller | calls | occupancy | oscillation | ratio "
             "r/b | starvation | goodput tok/s | TTFT p99 s | ringing s predicted / measured "
             "| lost |", "|" + "---|" * 13]
    for (think, lag), per in by_cell(rows).items():
        for ctl, pts in per.items():
            for load, r in pts:
                pred = _number(r["control.ringing_period_s.predicted"])
                meas = _number(r["control.ringing_period_s.measured"])
                rat = ratio(per, load) if ctl == "retire" else math.nan
                lines.append(
                    f"| x{think:g} | {lag:g} | {load:g} | {ctl} | {int(float(r['requests.submitted'])):,} "
                    f"| {_number(r['control.decode_occupancy_mean']):.3f} "
                    f"| {_number(r['control.oscillation_index']):.3f} "
                    f"| {'' if math.isnan(rat) else f'{rat:.2f}'} "
                    f"| {_number(r['control.decode_starvation_fraction']):.3f} "
                    f"| {_number(r['goodput.output_tokens_per_s']):,.0f} "
                    f"| {_number(r['ttft_s.p99']):.1f} "
                    f"| {'-' if math.isnan(pred) else f'{pred:.1f}'} / "
                    f"{'-' if math.isnan(meas) else f'{meas:.0f}'} "
                    f"| {r['requests.lost']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sweeps", nargs="+", metavar="LABEL=PATH",
                   help="a label and a sweep-replay --out directory (its table.csv) or a "
                        "table.csv kept elsewhere (docs/control/)")
    p.add_argument("--img", type=Path, default=Path("docs/img"), help="where PNGs go")
    p.add_argument("--markdown", action="store_true", help="print tables, write no PNG")
    args = p.parse_args()
    for item in args.sweeps:
        label, _, where = item.partition("=")
        if not where:
            p.error(f"expected LABEL=PATH, got {item!r}")
        table = Path(where) if where.endswith(".csv") else Path(where) / "table.csv"
        if not table.exists():
            p.error(f"{table}: no such file (run the sweep first)")
        rows = read_table(table)
        if args.markdown:
            print(markdown(label, rows))
        else:
            print(plot(label, rows, args.img))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
