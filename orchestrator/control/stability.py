"""The admission loop, linearised: its phase margin, delay included.

A policy declares its own linearised loop (`loop_model(config) -> LoopModel | None`,
the optional part of `AdmissionPolicy`: orchestrator.control.policies.base); one
without the method, or returning None, has no model, and the summary reports none.
The built-in periodic loops steer a quantity that integrates admissions:
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
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from scipy.signal import TransferFunction


class LoopModelError(ValueError):
    """A loop model of the wrong shape: names the field, the value and what was expected."""


def _coefficients(name: str, values: tuple[float, ...]) -> None:
    if not values or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
        raise LoopModelError(f"{name}: expected finite numbers, got {values!r}")
    if values[0] == 0:
        raise LoopModelError(f"{name}: the leading coefficient must not be 0, got {values!r}")


@dataclass(frozen=True)
class LoopModel:
    """A linearised open loop: a rational transfer function (coefficients of s, highest
    power first) and a pure delay of `delay_s`, plus the run's measured pipeline delay
    (admission to joining decode) when `through_pipeline` (the loop sees its admissions
    only once they reach decode). `period_s`: the loop's sampling period (frequencies are
    searched up to its Nyquist)."""

    numerator: tuple[float, ...]
    denominator: tuple[float, ...]
    delay_s: float
    period_s: float
    through_pipeline: bool = False

    def __post_init__(self) -> None:
        _coefficients("numerator", self.numerator)
        _coefficients("denominator", self.denominator)
        if len(self.numerator) > len(self.denominator):
            raise LoopModelError(f"numerator {self.numerator!r}: of a higher order than the "
                                 f"denominator {self.denominator!r} (not proper)")
        if not (math.isfinite(self.delay_s) and self.delay_s >= 0):
            raise LoopModelError(f"delay_s: expected seconds >= 0, got {self.delay_s!r}")
        if not (math.isfinite(self.period_s) and self.period_s > 0):
            raise LoopModelError(f"period_s: expected seconds > 0, got {self.period_s!r}")


def open_loop(model: LoopModel, pipeline_s: float) -> tuple[TransferFunction, float]:
    """(rational part, delay in seconds) of the linearised open loop, with the run's
    measured pipeline delay `pipeline_s`."""
    from scipy.signal import TransferFunction

    delay = model.delay_s + pipeline_s if model.through_pipeline else model.delay_s
    return TransferFunction(list(model.numerator), list(model.denominator)), delay


def _response(tf: TransferFunction, w: float | np.ndarray) -> np.ndarray:
    """The rational part's response at angular frequencies `w` (rad/s)."""
    from scipy.signal import freqresp

    return freqresp(tf, np.atleast_1d(np.asarray(w, dtype=float)))[1]


def phase_margin_deg(model: LoopModel, pipeline_s: float) -> float:
    """180 degrees plus the open loop's phase where its gain crosses 1."""
    from scipy.optimize import brentq

    tf, delay = open_loop(model, pipeline_s)
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


def ringing_period_s(model: LoopModel, pipeline_s: float) -> float | None:
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
    tf, delay = open_loop(model, pipeline_s)
    lo, hi = 1e-5, 2 * math.pi / (2 * model.period_s)  # up to the sampling Nyquist
    if phase_margin_deg(model, pipeline_s) < 0:
        w180 = _phase_crossover(tf, delay, lo, hi)
        return None if w180 is None else 2 * math.pi / w180
    w = np.geomspace(lo, hi, 4000)
    loop = _response(tf, w) * np.exp(-1j * delay * w)
    closed = np.abs(loop / (1 + loop))
    k = int(np.argmax(closed))
    if closed[k] <= RESONANCE or k in (0, len(w) - 1):
        return None
    return float(2 * math.pi / w[k])
