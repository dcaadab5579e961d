"""The admission loop, linearised: its phase margin, delay included.

Both built-in loops steer a quantity that integrates admissions:
- `buffered` admits at mu + (g / tau) (B* - EWMA_tau(B)) on a backlog B seen `lag`
  seconds late. Open loop: L(s) = g / (tau s (1 + tau s)) e^{-lag s}.
- `retire` admits, every period T, the decode slots it sees free, which fill only
  once the admitted calls reach decode (observation lag plus fill latency D).
  Open loop: L(s) = e^{-(lag + D) s} / (T s).
The rational part is a `scipy.signal` transfer function; the delay is exact
(e^{-j w tau}). A negative phase margin means the loop rings.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, signal

from orchestrator.control.config import ControlConfig


def open_loop(controller: str, config: ControlConfig, fill_latency_s: float
              ) -> tuple[signal.TransferFunction, float]:
    """(rational part, delay in seconds) of the linearised open loop."""
    lag = config.observation_lag_s
    if controller == "retire":
        period = config.fast_period_s
        return signal.TransferFunction([1.0], [period, 0.0]), lag + fill_latency_s
    if controller in ("buffered", "predictive"):
        tau, g = config.backlog_ewma_s, config.backlog_gain
        return signal.TransferFunction([g], [tau * tau, tau, 0.0]), lag
    raise ValueError(f"no linear model for controller {controller!r}")


def phase_margin_deg(controller: str, config: ControlConfig, fill_latency_s: float) -> float:
    """180 degrees plus the open loop's phase where its gain crosses 1."""
    tf, delay = open_loop(controller, config, fill_latency_s)

    def gain(w: float) -> float:
        _, h = signal.freqresp(tf, [w])
        return abs(h[0])

    lo, hi = 1e-6, 1e3
    crossover = optimize.brentq(lambda w: math.log(gain(w)), lo, hi)
    _, h = signal.freqresp(tf, [crossover])
    phase = np.angle(h[0]) - delay * crossover
    return float(math.degrees(phase) + 180.0)
