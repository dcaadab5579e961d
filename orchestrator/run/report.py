"""A self-contained HTML report comparing runs: plots over time and the summary table."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence

import numpy as np

from orchestrator.run.load_window import window_bounds_s
from orchestrator.run.replay import ReplayResult


def _smooth(values: np.ndarray, n: int) -> np.ndarray:
    if len(values) < n or n <= 1:
        return values
    kernel = np.ones(n) / n
    return np.convolve(values, kernel, mode="same")


def plot_png(results: dict[str, ReplayResult]) -> bytes:
    """The report's figure (`plot_figure`) as PNG bytes, every label inside the image."""
    import matplotlib.pyplot as plt

    from costmodel import plotstyle

    fig = plot_figure(results)
    buf = io.BytesIO()
    plotstyle.save(fig, buf, dpi=90, format="png")
    plt.close(fig)
    return buf.getvalue()


def plot_figure(results: dict[str, ReplayResult]):
    """Decode occupancy, calls waiting, admission rate and TTFT over time, a line per run
    in its controller's colour (costmodel.plotstyle)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from costmodel import plotstyle

    plotstyle.apply()
    colours = plotstyle.Colours(results)  # one colour per run, the same in every panel
    fig, axes = plt.subplots(4, 1, figsize=(13, 12), sharex=True)
    for name, res in results.items():
        s, (color, ls) = res.series, colours.style(name)
        t = s.array("time_s")
        axes[0].plot(t, s.array("decode_occupancy"), lw=0.7, color=color, ls=ls, label=name)
        axes[1].plot(t, s.array("backlog"), lw=0.7, color=color, ls=ls)
        axes[1].plot(t, s.array("admission_queue"), lw=0.7, ls=":", color=color)
        period = res.control.fast_period_s
        axes[2].plot(t, _smooth(s.array("admitted") / period, 10), lw=0.9, color=color, ls=ls)
        ttft = s.array("ttft_mean_s")
        ok = ~np.isnan(ttft)
        axes[3].plot(t[ok], ttft[ok], lw=0.7, color=color, ls=ls)
    first = next(iter(results.values()), None)
    if first is not None:  # the runs share their sessions: one band, one window
        lo, hi = window_bounds_s(first)
        for ax in axes:
            ax.axvspan(first.first_session_s, first.last_session_s, color="0.92", zorder=-2)
            ax.axvspan(lo, hi, color="0.82", zorder=-1)
    axes[0].set_ylabel("decode occupancy\n(running / slots)")
    axes[1].set_ylabel("calls waiting")
    axes[2].set_ylabel("admission rate\n(calls/s, 10-period mean)")
    axes[3].set_ylabel("TTFT of calls\nstarting decode (s)")
    axes[3].set_yscale("log")
    axes[3].set_xlabel("simulated time (s); shaded: sessions being started, darker: the load "
                       "window (docs/metrics.md)")
    # One key for the runs' colours, beside the top panel; the second panel's two kinds of
    # line in grey. Outside the axes, so no legend covers a curve.
    from matplotlib.lines import Line2D

    key = axes[0].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), title="run")
    for line in key.get_lines():
        line.set_linewidth(2.5)  # a swatch, not a hairline
    axes[1].legend([Line2D([], [], color=plotstyle.GREY), Line2D([], [], color=plotstyle.GREY,
                                                                  ls=":")],
                   ["backlog", "admission queue"], loc="upper left", bbox_to_anchor=(1.01, 1.0))
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    plotstyle.log_ticks(axes[3].yaxis)
    return fig


def _rows(summaries: dict[str, dict]) -> str:
    from orchestrator.run.tables import summary_rows

    out = []
    for label, cells in summary_rows(summaries):
        out.append("<tr><th>" + html.escape(label) + "</th>"
                   + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return "\n".join(out)


def write_report(path, results: dict[str, ReplayResult], summaries: dict[str, dict],
                 title: str, notes: str = "", claims: Sequence = ()) -> None:
    """The runs' report page. `claims`: what the runs were run to show, each with `claim`,
    `holds` and `figures` (`orchestrator.run.demo.Claim`), shown first when given."""
    from orchestrator.run.loop_plot import loop_png, loop_view
    from orchestrator.run.tables import null_notes

    png = base64.b64encode(plot_png(results)).decode("ascii")
    views = [loop_view(name, res, summaries.get(name, {})) for name, res in results.items()]
    loop = base64.b64encode(loop_png(views)).decode("ascii")
    notes_html = "".join(f"<p>{html.escape(line)}</p>" for line in null_notes(summaries))
    head = "".join(f"<th>{html.escape(n)}</th>" for n in summaries)
    claims_html = "" if not claims else (
        f"<h2>Claims on these traces: {sum(c.holds for c in claims)} of {len(claims)} hold</h2>"
        "<table><tr><th>claim</th><th>holds</th><th>figures</th></tr>"
        + "".join(f"<tr><td style=\"text-align:left\">{html.escape(c.claim)}</td>"
                  f"<td>{'yes' if c.holds else 'NO'}</td>"
                  f"<td style=\"text-align:left\">{html.escape(c.figures)}</td></tr>"
                  for c in claims)
        + "</table>")
    doc = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 1100px; }}
table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #ccc; padding: 4px 10px; text-align: right; }}
th:first-child {{ text-align: left; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>{html.escape(notes)}</p>
{claims_html}
<img alt="decode occupancy, backlog, admission rate and TTFT over time"
 src="data:image/png;base64,{png}" style="width:100%">
<h2>The loop</h2>
<p>Each controller's declared loop model (its open loop L at this run's observation lag and
measured pipeline delay: gain, phase and Nyquist curve) beside the measured spectrum of
decode occupancy in the load window. Dashed: the predicted ringing frequency; dotted: the
measured one. A controller without a linear model (local) has its spectrum only.
See docs/control.md.</p>
<img alt="open-loop Bode and Nyquist plots and the measured occupancy spectrum"
 src="data:image/png;base64,{loop}" style="width:100%">
<h2>Summary</h2>
<table><tr><th>figure</th>{head}</tr>
{_rows(summaries)}
</table>
{notes_html}
<p>The load window: from the first session start plus 10% of the span in which sessions
start, to the last start; rates marked "load window" count the calls completed in it, those
marked "run" every call over the whole run, drain included. Oscillation index: the relative
RMS of decode occupancy's fluctuations faster than one slow-loop period, over the load
window (null on a decode almost idle). Decode starvation: share of the window's samples with
decode below half its slots while calls wait in the admission queue or the ready buffer.
See docs/metrics.md.</p>
</body></html>
"""
    path.write_text(doc)
