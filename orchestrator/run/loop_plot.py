"""The admission loop drawn: each policy's declared loop model (Bode and Nyquist) beside
the measured spectrum of decode occupancy, the predicted and measured ringing periods
marked (docs/control.md, "Seeing the loop").

The model is the policy's own (`AdmissionPolicy.loop_model`, `result.loop_model`) at the
run's observation lag and measured pipeline delay (`summary.pipeline_s`); the spectrum is
Welch's over the load window, as the summary's measured period
(`summary.dominant_period_s`). A policy that declares no model (`local`) has a measured
spectrum only.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np

from orchestrator.run.replay import ReplayResult


@dataclass(frozen=True)
class LoopView:
    """What the loop page draws for one run: the open loop's frequency response (None
    without a model) and the measured spectrum of decode occupancy (None when the window
    holds too few samples or a flat occupancy)."""

    name: str
    freq_hz: np.ndarray | None  # where the open loop is evaluated
    open_loop: np.ndarray | None  # L(j 2 pi f), delay included
    phase_margin_deg: float | None
    predicted_period_s: float | None
    spectrum_hz: np.ndarray | None
    spectrum: np.ndarray | None  # power spectral density, normalised to its peak
    measured_period_s: float | None


def loop_view(name: str, result: ReplayResult, summary: dict) -> LoopView:
    """A run's loop page from its result and its summary's figures (the same predicted and
    measured periods the summary prints)."""
    from scipy.signal import welch

    from orchestrator.control.stability import open_loop
    from orchestrator.run.summary import pipeline_s, window_mask

    control = summary.get("control", {})
    periods = control.get("ringing_period_s", {})
    nyquist_hz = 0.5 / result.control.fast_period_s
    freq = response = None
    if result.loop_model is not None:
        tf, delay = open_loop(result.loop_model, pipeline_s(result))
        freq = np.geomspace(1e-4, nyquist_hz, 600)
        w = 2 * math.pi * freq
        num, den = np.polyval(tf.num, 1j * w), np.polyval(tf.den, 1j * w)
        response = num / den * np.exp(-1j * delay * w)
    occ = result.series.array("decode_occupancy")[window_mask(result)]
    spec_f = spec = None
    if len(occ) >= 16 and occ.std() > 0:
        spec_f, power = welch(occ - occ.mean(), fs=1.0 / result.control.fast_period_s,
                              nperseg=min(256, len(occ)))
        spec_f, spec = spec_f[1:], power[1:] / power[1:].max()  # the zero frequency aside
    return LoopView(name=name, freq_hz=freq, open_loop=response,
                    phase_margin_deg=control.get("phase_margin_deg"),
                    predicted_period_s=periods.get("predicted"), spectrum_hz=spec_f,
                    spectrum=spec, measured_period_s=periods.get("measured"))


def loop_figure(views: list[LoopView]):
    """Four panels, a colour per run (costmodel.plotstyle): the open loop's gain and phase
    against frequency, its Nyquist curve near -1, and the measured spectrum of decode
    occupancy; a dashed line at each run's predicted ringing frequency, a dotted one at
    its measured one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from costmodel import plotstyle

    plotstyle.apply()
    colours = plotstyle.Colours([v.name for v in views])
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    gain, phase, nyq, spec = axes[0, 0], axes[1, 0], axes[0, 1], axes[1, 1]
    for v in views:
        color, ls = colours.style(v.name)
        if v.open_loop is not None:
            pm = "" if v.phase_margin_deg is None else f" (phase margin {v.phase_margin_deg:.0f} deg)"
            gain.loglog(v.freq_hz, np.abs(v.open_loop), color=color, ls=ls, label=v.name + pm)
            phase.semilogx(v.freq_hz, np.degrees(np.unwrap(np.angle(v.open_loop))),
                           color=color, ls=ls)
            nyq.plot(v.open_loop.real, v.open_loop.imag, color=color, ls=ls)
        if v.spectrum is not None:
            spec.semilogx(v.spectrum_hz, v.spectrum, color=color, ls=ls, label=v.name)
        for ax in (gain, phase, spec):
            if v.predicted_period_s:
                ax.axvline(1.0 / v.predicted_period_s, color=color, ls="--", lw=0.9)
            if v.measured_period_s:
                ax.axvline(1.0 / v.measured_period_s, color=color, ls=":", lw=1.2)
    gain.axhline(1.0, color=plotstyle.GREY, lw=0.8)
    phase.axhline(-180.0, color=plotstyle.GREY, lw=0.8)
    nyq.plot([-1], [0], marker="x", color="black", ms=9)
    nyq.axhline(0, color=plotstyle.GREY, lw=0.6)
    nyq.axvline(0, color=plotstyle.GREY, lw=0.6)
    nyq.set_xlim(-3.0, 1.0)  # around -1, where the margins are read
    nyq.set_ylim(-3.0, 1.0)
    gain.set_ylabel("open-loop gain |L(j2\u03c0f)|")
    phase.set_ylabel("open-loop phase (degrees, delay included)")
    phase.set_xlabel("frequency (Hz); dashed: predicted ringing, dotted: measured")
    nyq.set_xlabel("Re L")
    nyq.set_ylabel("Im L  (x: the critical point -1)")
    spec.set_ylabel("decode occupancy spectrum\n(Welch, load window, peak = 1)")
    spec.set_xlabel("frequency (Hz)")
    if any(v.open_loop is not None for v in views):
        gain.legend(loc="lower left", fontsize=8)
    if any(v.spectrum is not None for v in views):
        spec.legend(loc="upper right", fontsize=8)
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def loop_png(views: list[LoopView]) -> bytes:
    """`loop_figure` as PNG bytes."""
    import matplotlib.pyplot as plt

    from costmodel import plotstyle

    fig = loop_figure(views)
    buf = io.BytesIO()
    plotstyle.save(fig, buf, dpi=90, format="png")
    plt.close(fig)
    return buf.getvalue()
