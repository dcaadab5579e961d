"""The admission loop, linearised: its phase margin, delay included.

Both built-in loops steer a quantity that integrates admissions:
- `buffered` admits at mu + (g / tau) (B* - EWMA_tau(B)) on a backlog B seen `lag`
  seconds late. Open loop: L(s) = g / (tau s (1 + tau s)) e^{-lag s}.
- `retire` admits, every period T, the decode slots it sees free, which fill only
  once the admitted calls reach decode (observation lag plus fill latency D).
  Open loop: L(s) = e^{-(lag + D) s} / (T s).
The rational part is a `scipy.signal.TransferFunction`, evaluated by
`scipy.signal.freqresp`; the delay is exact (e^{-j w tau}); the crossovers are
`scipy.optimize.brentq`'s roots. SciPy is imported when a margin is first asked for (the
summary asks once a run), not when this module is. A negative phase margin means the
loop rings.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from orchestrator.control.config import ControlConfig

if TYPE_CHECKING:
    from scipy.signal import TransferFunction


def open_loop(controller: str, config: ControlConfig, fill_latency_s: float
              ) -> tuple[TransferFunction, float]:
    """(rational part, delay in seconds) of the linearised open loop."""
    from scipy.signal import TransferFunction

    lag = config.observation_lag_s
    if controller == "retire":
        period = config.fast_period_s
        return TransferFunction([1.0], [period, 0.0]), lag + fill_latency_s
    if controller in ("buffered", "predictive"):
        tau, g = config.backlog_ewma_s, config.backlog_gain
        return TransferFunction([g], [tau * tau, tau, 0.0]), lag
    raise ValueError(f"no linear model for controller {controller!r}")


def _response(tf: TransferFunction, w: float | np.ndarray) -> np.ndarray:
    """The rational part's response at angular frequencies `w` (rad/s)."""
    from scipy.signal import freqresp

    return freqresp(tf, np.atleast_1d(np.asarray(w, dtype=float)))[1]


def phase_margin_deg(controller: str, config: ControlConfig, fill_latency_s: float) -> float:
    """180 degrees plus the open loop's phase where its gain crosses 1."""
    from scipy.optimize import brentq

    tf, delay = open_loop(controller, config, fill_latency_s)
    crossover = brentq(lambda w: math.log(abs(_response(tf, w)[0])), 1e-6, 1e3)
    phase = np.angle(_response(tf, crossover)[0]) - delay * crossover
    return float(math.degrees(phase) + 180.0)


# A closed-loop resonant peak of 1.01 (0.09 dB) is a damping ratio of ~0.65 in a second-
# order loop: a step overshoots ~7%. Below it the response is called not ringing.
RESONANCE = 1.01


def _phase_crossover(tf: TransferFunction, delay: float, lo: float, hi: float) -> float | None:
    """The lowest frequency in (lo, hi) where the open loop's phase reaches -180 degrees."""
    from scipy.optimize import brentq

    w = np.geomspace(lo, hi, 4000)
    phase = np.unwrap(np.angle(_response(tf, w))) - delay * w + math.pi
    below = np.nonzero(phase <= 0.0)[0]
    if not len(below) or below[0] == 0:
        return None
    k = below[0]
    return float(brentq(
        lambda x: float(np.angle(_response(tf, x)[0])) - delay * x + math.pi,
        w[k - 1], w[k]))


def ringing_period_s(controller: str, config: ControlConfig, pipeline_s: float
                     ) -> float | None:
    """The period at which the linearised loop rings, from the run's observation lag and
    measured pipeline delay `pipeline_s` (admission to joining decode), or None if it is
    not predicted to ring.

    Negative phase margin: the linear loop is unstable and the admission limits (admit
    nothing below zero, never more than the free slots) bound it into a limit cycle at
    the phase crossover, where the open loop's phase is -180 degrees (describing-function
    analysis of a saturating loop: Slotine and Li, *Applied Nonlinear Control*, 1991,
    ch. 5). Positive margin: the closed loop's resonant peak, if its gain exceeds
    `RESONANCE` (damped ringing, damping ratio below ~0.65); a loop with no such peak
    does not ring."""
    tf, delay = open_loop(controller, config, pipeline_s)
    lo, hi = 1e-5, 2 * math.pi / (2 * config.fast_period_s)  # up to the sampling Nyquist
    if phase_margin_deg(controller, config, pipeline_s) < 0:
        w180 = _phase_crossover(tf, delay, lo, hi)
        return None if w180 is None else 2 * math.pi / w180
    w = np.geomspace(lo, hi, 4000)
    loop = _response(tf, w) * np.exp(-1j * delay * w)
    closed = np.abs(loop / (1 + loop))
    k = int(np.argmax(closed))
    if closed[k] <= RESONANCE or k in (0, len(w) - 1):
        return None
    return float(2 * math.pi / w[k])
