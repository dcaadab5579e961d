"""Plots and tables of the control sweep's map (docs/control.md) from the `table.csv`
files `tokenfactory sweep-replay` writes for the grids in examples/sweeps/.

    python examples/sweeps/plot_control_map.py preset-dev=docs/control/preset-dev.csv \
        decode32-dev=docs/control/decode32-dev.csv --img docs/img
    python examples/sweeps/plot_control_map.py --x slots \
        slots-dev=docs/control/decode32-dev.csv slots-dev=docs/control/slots-dev.csv
    python examples/sweeps/plot_control_map.py preset-dev=DIR --markdown

Per label, one PNG (`control-map-<label>.png`): a column per cell (the axes other than
the x axis: think scale, observation lag, offered load, decode slots, predictor error;
a column title names those that vary), a row per figure, a line per controller. A
label given more than once merges its tables (the 32-slot map and the 64/128-slot grid
on one slot axis, say). Points that differ only in `seed` are one point: the line is
their mean, the shaded band their range (min to max), and the oscillation ratio
retire / buffered is taken per seed first. `--markdown` prints the same figures as
Markdown tables instead: mean, and the range across seeds in brackets.
"""

from __future__ import annotations

import argparse
import csv
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

# The axes a point is placed by: (name, how it reads from a row, how a value is printed).
AXES: dict[str, tuple[Callable[[dict[str, str]], float], str]] = {
    "think": (lambda r: float(r["think_scale"]), "think x{:g}"),
    "lag": (lambda r: float(r["observation_lag"]), "lag {:g} s"),
    "load": (lambda r: float(r["load"]), "load {:g}"),
    "slots": (lambda r: float(r["resources.decode_slots"]), "{:g} slots"),
    "error": (lambda r: float(r.get("predictor_error") or 1.0), "predictor x{:g}"),
}
X_LABELS = {"think": "think scale", "lag": "observation lag (s)",
            "load": "offered load (x planned capacity)", "slots": "decode slots",
            "error": "predictor error (x)"}
HEADS = {"think": "think x", "lag": "lag s", "load": "load", "slots": "decode slots",
         "error": "predictor error"}
RATIO = "ratio"
# (column of table.csv, label); RATIO is derived: retire / buffered oscillation index.
FIGURES = (
    (RATIO, "oscillation index\nretire / buffered"),
    ("control.oscillation_index", "oscillation index"),
    ("control.decode_starvation_fraction", "decode starvation"),
    ("control.admission_bound_fraction", "admission bound\n(share of periods)"),
    ("control.decode_occupancy_mean", "decode occupancy"),
    ("goodput.output_tokens_per_s", "goodput (tokens/s)"),
    ("ttft_s.p99", "TTFT p99 (s)"),
    ("control.ringing_period_s.measured", "ringing period (s)\nmeasured (line), "
                                          "predicted (dashed)"),
)
COLOURS = {"retire": "tab:red", "buffered": "tab:blue", "local": "tab:green",
           "predictive": "tab:purple", "smith": "tab:brown", "binding": "tab:cyan"}


def number(text: str | None) -> float:
    """A table cell as a float; an empty or missing cell is NaN."""
    return float(text) if text not in (None, "", "None") else math.nan


def read_table(path: Path) -> list[dict[str, str]]:
    """The rows of a sweep's table.csv that hold a summary (failed points left out)."""
    with path.open(newline="") as f:
        return [row for row in csv.DictReader(f) if not row.get("error")]


@dataclass(frozen=True)
class Stat:
    """One figure of one point over its seeds."""

    mean: float
    low: float
    high: float
    n: int

    @staticmethod
    def of(values: Sequence[float]) -> Stat:
        kept = [v for v in values if not math.isnan(v)]
        if not kept:
            return Stat(math.nan, math.nan, math.nan, 0)
        return Stat(sum(kept) / len(kept), min(kept), max(kept), len(kept))


Cell = tuple[tuple[str, float], ...]


@dataclass
class Map:
    """A table's points: cell -> controller -> x value -> the rows of its seeds."""

    x: str
    points: dict[Cell, dict[str, dict[float, list[dict[str, str]]]]]
    varying: tuple[str, ...]  # cell axes with more than one value
    constant: dict[str, float]  # cell axes with one value


def group(rows: Sequence[dict[str, str]], x: str) -> Map:
    """Place the rows by `x` and the other axes; a cell without both retire and buffered
    (an interrupted sweep's) is left out."""
    others = [a for a in AXES if a != x]
    points: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for row in rows:
        cell = tuple((a, AXES[a][0](row)) for a in others)
        points[cell][row["controller"]][AXES[x][0](row)].append(row)
    kept = {c: v for c, v in points.items() if {"retire", "buffered"} <= set(v)}
    values = {a: {dict(c)[a] for c in kept} for a in others}
    varying = tuple(a for a in others if len(values[a]) > 1)
    constant = {a: next(iter(v)) for a, v in values.items() if len(v) == 1}
    order = {"think": -1, "lag": 1, "load": 1, "slots": 1, "error": 1}
    cells = sorted(kept, key=lambda c: tuple(order[a] * v for a, v in c))
    return Map(x, {c: kept[c] for c in cells}, varying, constant)


def figure(rows: Sequence[dict[str, str]], column: str) -> Stat:
    """A column over the seeds of one point."""
    return Stat.of([number(r.get(column)) for r in rows])


def ratio(per: dict[str, dict[float, list[dict[str, str]]]], xv: float) -> Stat:
    """retire's oscillation index over buffered's, seed by seed, over the seeds both ran."""
    def by_seed(name: str) -> dict[str, float]:
        return {r.get("seed", ""): number(r["control.oscillation_index"])
                for r in per.get(name, {}).get(xv, ())}
    r, b = by_seed("retire"), by_seed("buffered")
    return Stat.of([r[s] / b[s] for s in sorted(r.keys() & b.keys()) if b[s] > 0])


def select(rows: Sequence[dict[str, str]], conditions: Sequence[str]) -> list[dict[str, str]]:
    """The rows whose axes (or seed) take the given values, `AXIS=VALUE` each."""
    kept = list(rows)
    for cond in conditions:
        axis, _, text = cond.partition("=")
        value = float(text)
        read = (lambda r: float(r["seed"])) if axis == "seed" else AXES[axis][0]
        kept = [r for r in kept if read(r) == value]
    return kept


def title(cell: Cell, axes: Sequence[str]) -> str:
    values = dict(cell)
    return ", ".join(AXES[a][1].format(values[a]) for a in axes)


def seeds(rows: Sequence[dict[str, str]]) -> str:
    found = sorted({int(float(r["seed"])) for r in rows if r.get("seed")})
    return ("seed " if len(found) == 1 else "seeds ") + ", ".join(map(str, found))


def plot(label: str, rows: list[dict[str, str]], x: str, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    m = group(rows, x)
    shown = [(c, n) for c, n in FIGURES if c == RATIO or any(r.get(c) for r in rows)]
    fig, axes = plt.subplots(len(shown), len(m.points), figsize=(
        3.2 * len(m.points), 2.2 * len(shown)), sharex=True, squeeze=False)
    for j, (cell, per) in enumerate(m.points.items()):
        axes[0][j].set_title(title(cell, m.varying), fontsize=9)
        xs_all = sorted({xv for pts in per.values() for xv in pts})
        for i, (column, name) in enumerate(shown):
            ax = axes[i][j]
            if column == RATIO:
                st = [ratio(per, xv) for xv in xs_all]
                ax.plot(xs_all, [s.mean for s in st], "o-", color="black")
                ax.fill_between(xs_all, [s.low for s in st], [s.high for s in st],
                                color="black", alpha=0.15, lw=0)
                ax.axhline(3.0, color="grey", lw=0.8, ls=":")
                ax.axhline(1.0, color="grey", lw=0.8)
            else:
                for ctl, pts in per.items():
                    xs = sorted(pts)
                    st = [figure(pts[xv], column) for xv in xs]
                    wide = ctl == "retire"  # drawn wide under the others where they agree
                    ax.plot(xs, [s.mean for s in st], "o-", ms=3, lw=4 if wide else 1.5,
                            alpha=0.45 if wide else 1.0, color=COLOURS.get(ctl), label=ctl)
                    ax.fill_between(xs, [s.low for s in st], [s.high for s in st],
                                    color=COLOURS.get(ctl), alpha=0.15, lw=0)
                    if column.endswith("measured") and ctl == "retire":
                        ax.plot(xs, [figure(pts[xv], "control.ringing_period_s.predicted")
                                     .mean for xv in xs], "x--", color=COLOURS[ctl])
            if column in ("ttft_s.p99", "control.ringing_period_s.measured"):
                ax.set_yscale("log")
            if x in ("load", "slots"):
                ax.set_xscale("log", base=2)
                ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xticks(xs_all, [f"{v:g}" for v in xs_all])
            if j == 0:
                ax.set_ylabel(name, fontsize=8)
            ax.tick_params(labelsize=7)
        axes[-1][j].set_xlabel(X_LABELS[x], fontsize=8)
    axes[1][0].legend(fontsize=7)
    notes = [AXES[a][1].format(v) for a, v in m.constant.items()]
    notes.append(seeds(rows))
    if len({r.get("seed") for r in rows}) > 1:
        notes.append("line: mean, band: range over seeds")
    fig.suptitle(f"control map: {label} ({'; '.join(notes)})", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    path = out / f"control-map-{label}.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def spread(s: Stat, fmt: str) -> str:
    """`mean`, or `mean (low-high)` over more than one seed; blank if nothing."""
    if s.n == 0:
        return ""
    text = format(s.mean, fmt)
    if s.n > 1:
        text += f" ({format(s.low, fmt)}-{format(s.high, fmt)})"
    return text


def period_range(s: Stat) -> str:
    """Measured periods over seeds: one value, or their range (a mean of Welch peaks,
    which sit on the estimator's bins, would be no period)."""
    if s.n == 0:
        return "-"
    return f"{s.low:.0f}" if s.low == s.high else f"{s.low:.0f}-{s.high:.0f}"


def markdown(label: str, rows: list[dict[str, str]], x: str) -> str:
    m = group(rows, x)
    bound = any(r.get("control.admission_bound_fraction") for r in rows)
    head = [*(HEADS[a] for a in m.varying), HEADS[x], "controller", "seeds",
            "calls", "occupancy", "oscillation", "ratio r/b", "starvation",
            *(["bound"] if bound else []), "goodput tok/s", "TTFT p99 s",
            "ringing s predicted / measured", "lost"]
    fixed = ", ".join(AXES[a][1].format(v) for a, v in m.constant.items())
    lines = [f"### {label}", "", f"{fixed}; {seeds(rows)}", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cell, per in m.points.items():
        values = dict(cell)
        for ctl, pts in per.items():
            for xv in sorted(pts):
                rs = pts[xv]
                pred = figure(rs, "control.ringing_period_s.predicted")
                meas = figure(rs, "control.ringing_period_s.measured")
                rat = ratio(per, xv) if ctl == "retire" else Stat.of([])
                cells = [*(f"{values[a]:g}" for a in m.varying), f"{xv:g}", ctl,
                         str(len(rs)), f"{figure(rs, 'requests.submitted').mean:,.0f}",
                         spread(figure(rs, "control.decode_occupancy_mean"), ".3f"),
                         spread(figure(rs, "control.oscillation_index"), ".3f"),
                         spread(rat, ".2f"),
                         spread(figure(rs, "control.decode_starvation_fraction"), ".3f"),
                         *([spread(figure(rs, "control.admission_bound_fraction"), ".3f")]
                           if bound else []),
                         spread(figure(rs, "goodput.output_tokens_per_s"), ",.0f"),
                         spread(figure(rs, "ttft_s.p99"), ".1f"),
                         f"{spread(pred, '.1f') or '-'} / {period_range(meas)}",
                         f"{figure(rs, 'requests.lost').high:g}"]
                lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sweeps", nargs="+", metavar="LABEL=PATH",
                   help="a label and a sweep-replay --out directory (its table.csv) or a "
                        "table.csv kept elsewhere (docs/control/); a label given twice "
                        "merges its tables")
    p.add_argument("--x", choices=sorted(AXES), default="load",
                   help="the x axis (default load)")
    p.add_argument("--where", action="append", default=[], metavar="AXIS=VALUE",
                   help="keep only the points with this value (axes: "
                        f"{', '.join(AXES)}, seed); repeatable")
    p.add_argument("--img", type=Path, default=Path("docs/img"), help="where PNGs go")
    p.add_argument("--markdown", action="store_true", help="print tables, write no PNG")
    args = p.parse_args()
    tables: dict[str, list[dict[str, str]]] = {}
    for item in args.sweeps:
        label, _, where = item.partition("=")
        if not where:
            p.error(f"expected LABEL=PATH, got {item!r}")
        table = Path(where) if where.endswith(".csv") else Path(where) / "table.csv"
        if not table.exists():
            p.error(f"{table}: no such file (run the sweep first)")
        tables.setdefault(label, []).extend(read_table(table))
    for cond in args.where:
        axis, sep, text = cond.partition("=")
        try:
            float(text)
        except ValueError:
            sep = ""
        if not sep or axis not in (*AXES, "seed"):
            p.error(f"--where {cond!r}: expected AXIS=NUMBER, AXIS one of "
                    f"{', '.join(AXES)}, seed")
    for label, rows in tables.items():
        rows = select(rows, args.where)
        if not group(rows, args.x).points:
            p.error(f"{label}: no cell with both retire and buffered")
        if args.markdown:
            print(markdown(label, rows, args.x))
        else:
            print(plot(label, rows, args.x, args.img))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
