"""A sweep's results for people: the table printed at the end, and `report.html`.

One row per point: the keys the grid varies, then the figures a sweep is read
for: goodput and throughput in the load window (docs/metrics.md), p99 TTFT and
ITL, energy per call, decode occupancy, the oscillation index (null on a
decode almost idle) and whether the point is on a frontier. `report.html` holds
the same table, the grid, and the frontier PNGs, self-contained like the
demo's report.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

from orchestrator.sweeps.frontier import FRONTIERS, frontier_masks

# (label, column of table.csv, format); short labels: the table fits a terminal.
FIGURES = (
    ("goodput tok/s", "goodput.window.output_tokens_per_s", "{:,.1f}"),
    ("tok/s", "throughput.window.output_tokens_per_s", "{:,.1f}"),
    ("sessions", "load.sessions_started", "{:,.0f}"),
    ("TTFT p99 s", "ttft_s.p99", "{:,.2f}"),
    ("ITL p99 ms", "itl_s.p99", "ms"),
    ("kJ/call", "energy.joules_per_call", "kJ"),
    ("decode occ.", "control.decode_occupancy_mean", "{:.3f}"),
    ("osc. index", "control.oscillation_index", "{:.3f}"),
)
# The frontiers a point is on, by letter (FRONTIERS' order): p99 TTFT, p99 TPOT, energy.
FRONTIER_LETTERS = "TPE"
LEGEND = ("rates in the load window (docs/metrics.md); frontiers of goodput against "
          "T: p99 TTFT, P: p99 TPOT, E: energy per call; osc. index null (-) on a decode "
          "almost idle")


def _cell(value: Any, fmt: str) -> str:
    if value is None or value == "" or (isinstance(value, float) and value != value):
        return "-"
    if not isinstance(value, int | float):
        return str(value)
    if fmt == "ms":
        return f"{value * 1e3:,.1f}"
    if fmt == "kJ":
        return f"{value / 1e3:,.2f}"
    return fmt.format(value)


def result_rows(rows: list[dict[str, Any]], varying: list[str]) -> tuple[list[str],
                                                                         list[list[str]]]:
    """Header and formatted cells: the varying keys, the figures, the frontiers a point is
    on (FRONTIER_LETTERS), or its error."""
    masks = frontier_masks(rows)
    header = [*varying, *(label for label, _, _ in FIGURES), "frontiers"]
    out = []
    for i, row in enumerate(rows):
        cells = [str(row.get(k, "")) for k in varying]
        if row.get("error"):
            cells += ["-"] * len(FIGURES) + [f"failed: {row['error']}"]
        else:
            cells += [_cell(row.get(col), fmt) for _, col, fmt in FIGURES]
            on = [letter for letter, (cost, _, _) in zip(FRONTIER_LETTERS, FRONTIERS,
                                                         strict=True) if masks[cost][i]]
            cells.append("".join(on) or "-")
        out.append(cells)
    return header, out


def print_results(rows: list[dict[str, Any]], varying: list[str], title: str) -> None:
    from rich.table import Table

    from orchestrator.run.tables import print_table

    header, cells = result_rows(rows, varying)
    table = Table(title=title, caption=LEGEND)
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i < len(varying) else "right")
    for row in cells:
        table.add_row(*row)
    print_table(table)


def write_report(path: Path, rows: list[dict[str, Any]], varying: list[str], grid_text: str,
                 pngs: list[Path], title: str) -> None:
    """`report.html`: the grid, the results table and the frontier plots, one file."""
    header, cells = result_rows(rows, varying)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "\n".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                     for row in cells)
    images = "\n".join(
        f'<h3>{html.escape(p.stem.replace("_", " "))}</h3><img alt="{html.escape(p.stem)}" '
        f'src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode("ascii")}" '
        'style="max-width:100%">' for p in pngs if p.exists())
    doc = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1200px; }}
table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}
pre {{ background: #f6f6f6; padding: 1em; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<h2>Grid</h2>
<pre>{html.escape(grid_text)}</pre>
<h2>Results</h2>
<p>{html.escape(LEGEND)}. The load window runs from the first session start plus 10% of
the span sessions start in, to the last start; the whole-run figures, drain included, are in
table.csv.</p>
<table><tr>{head}</tr>
{body}
</table>
<h2>Frontiers</h2>
{images}
</body></html>
"""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(doc)
    tmp.replace(path)
