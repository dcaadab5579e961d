"""The admission loop, linearised: its phase margin, delay included.

Both built-in loops steer a quantity that integrates admissions:
- `buffered` admits at mu + (g / tau) (B* - EWMA_tau(B)) on a backlog B seen `lag`
  seconds late. Open loop: L(s) = g / (tau s (1 + tau s)) e^{-lag s}.
- `retire` admits, every period T, the decode slots it sees free, which fill only
  once the admitted calls reach decode (observation lag plus fill latency D).
  Open loop: L(s) = e^{-(lag + D) s} / (T s).
The rational part is a `Rational` transfer function (its frequency response the floats
`scipy.signal.freqresp` gives, in numpy); the delay is exact (e^{-j w tau}). A negative
phase margin means the loop rings.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from orchestrator.control.brent import brentq
from orchestrator.control.config import ControlConfig

# No SciPy here (importing scipy.optimize and scipy.signal costs ~0.65 s a process):
# `Rational.freqresp` is numpy, the roots are `brent.brentq`, SciPy's method step for step.


class Rational(NamedTuple):
    """num(s) / den(s), coefficients in descending powers of s, normalised as
    `scipy.signal.TransferFunction` keeps them (divided by den's leading coefficient)."""

    num: np.ndarray
    den: np.ndarray

    @classmethod
    def of(cls, num: list[float], den: list[float]) -> Rational:
        if not den or den[0] == 0:
            raise ValueError(f"a transfer function needs a nonzero leading denominator, "
                             f"got {den!r}")
        num_a, den_a = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
        return cls(num_a / den_a[0], den_a / den_a[0])

    def freqresp(self, w: list[float] | np.ndarray) -> np.ndarray:
        """The response at angular frequencies `w` (rad/s): the floats of
        `scipy.signal.freqresp` (Horner's scheme in s = jw, then the quotient)."""
        s = 1j * np.atleast_1d(np.asarray(w, dtype=float))
        num, den = np.zeros_like(s), np.zeros_like(s)
        for c in self.num:
            num = num * s + c
        for c in self.den:
            den = den * s + c
        return num / den


def open_loop(controller: str, config: ControlConfig, fill_latency_s: float
              ) -> tuple[Rational, float]:
    """(rational part, delay in seconds) of the linearised open loop."""
    lag = config.observation_lag_s
    if controller == "retire":
        period = config.fast_period_s
        return Rational.of([1.0], [period, 0.0]), lag + fill_latency_s
    if controller in ("buffered", "predictive"):
        tau, g = config.backlog_ewma_s, config.backlog_gain
        return Rational.of([g], [tau * tau, tau, 0.0]), lag
    raise ValueError(f"no linear model for controller {controller!r}")


def phase_margin_deg(controller: str, config: ControlConfig, fill_latency_s: float) -> float:
    """180 degrees plus the open loop's phase where its gain crosses 1."""
    tf, delay = open_loop(controller, config, fill_latency_s)

    def gain(w: float) -> float:
        return abs(tf.freqresp([w])[0])

    lo, hi = 1e-6, 1e3
    crossover = brentq(lambda w: math.log(gain(w)), lo, hi)
    h = tf.freqresp([crossover])
    phase = np.angle(h[0]) - delay * crossover
    return float(math.degrees(phase) + 180.0)


# A closed-loop resonant peak of 1.01 (0.09 dB) is a damping ratio of ~0.65 in a second-
# order loop: a step overshoots ~7%. Below it the response is called not ringing.
RESONANCE = 1.01


def _phase_crossover(tf: Rational, delay: float, lo: float, hi: float) -> float | None:
    """The lowest frequency in (lo, hi) where the open loop's phase reaches -180 degrees."""
    w = np.geomspace(lo, hi, 4000)
    h = tf.freqresp(w)
    phase = np.unwrap(np.angle(h)) - delay * w + math.pi
    below = np.nonzero(phase <= 0.0)[0]
    if not len(below) or below[0] == 0:
        return None
    k = below[0]
    return float(brentq(
        lambda x: float(np.angle(tf.freqresp([x])[0])) - delay * x + math.pi,
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
    h = tf.freqresp(w)
    loop = h * np.exp(-1j * delay * w)
    closed = np.abs(loop / (1 + loop))
    k = int(np.argmax(closed))
    if closed[k] <= RESONANCE or k in (0, len(w) - 1):
        return None
    return float(2 * math.pi / w[k])
