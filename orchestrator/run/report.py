"""A self-contained HTML report comparing runs: plots over time and the summary table."""

from __future__ import annotations

import base64
import html
import io

import numpy as np

from orchestrator.run.replay import ReplayResult

COLORS = {"retire": "#d62728", "buffered": "#1f77b4", "predictive": "#2ca02c"}


def _smooth(values: np.ndarray, n: int) -> np.ndarray:
    if len(values) < n or n <= 1:
        return values
    kernel = np.ones(n) / n
    return np.convolve(values, kernel, mode="same")


def plot_png(results: dict[str, ReplayResult]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 1, figsize=(11, 11), sharex=True)
    for name, res in results.items():
        s, color = res.series, COLORS.get(name)
        t = s.array("time_s")
        axes[0].plot(t, s.array("decode_occupancy"), lw=0.6, color=color, label=name)
        axes[1].plot(t, s.array("backlog"), lw=0.6, color=color, label=f"{name} backlog")
        axes[1].plot(t, s.array("admission_queue"), lw=0.6, ls=":", color=color,
                     label=f"{name} admission queue")
        period = res.control.fast_period_s
        axes[2].plot(t, _smooth(s.array("admitted") / period, 10), lw=0.8, color=color,
                     label=name)
        ttft = s.array("ttft_mean_s")
        ok = ~np.isnan(ttft)
        axes[3].plot(t[ok], ttft[ok], lw=0.6, color=color, label=name)
        for ax in axes:
            ax.axvspan(res.first_session_s, res.last_session_s, color="0.9", zorder=-1)
    axes[0].set_ylabel("decode occupancy\n(running / slots)")
    axes[1].set_ylabel("calls waiting")
    axes[2].set_ylabel("admission rate\n(calls/s, 10-period mean)")
    axes[3].set_ylabel("TTFT of calls\nstarting decode (s)")
    axes[3].set_yscale("log")
    axes[3].set_xlabel("simulated time (s); shaded: sessions being started")
    for ax in axes:
        ax.legend(loc="upper right", fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def _rows(summaries: dict[str, dict]) -> str:
    from orchestrator.run.tables import summary_rows

    out = []
    for label, cells in summary_rows(summaries):
        out.append("<tr><th>" + html.escape(label) + "</th>"
                   + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return "\n".join(out)


def write_report(path, results: dict[str, ReplayResult], summaries: dict[str, dict],
                 title: str, notes: str = "") -> None:
    png = base64.b64encode(plot_png(results)).decode("ascii")
    head = "".join(f"<th>{html.escape(n)}</th>" for n in summaries)
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
<img alt="decode occupancy, backlog, admission rate and TTFT over time"
 src="data:image/png;base64,{png}" style="width:100%">
<h2>Summary</h2>
<table><tr><th>figure</th>{head}</tr>
{_rows(summaries)}
</table>
<p>Oscillation index: coefficient of variation of decode occupancy, sampled every fast-loop
period while sessions are being started (after the first 10% of that span). Decode starvation:
share of those samples with decode below half its slots while calls wait in the admission queue or the ready buffer.
See docs/metrics.md.</p>
</body></html>
"""
    path.write_text(doc)
