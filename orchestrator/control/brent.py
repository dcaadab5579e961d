"""Brent's root finder on a bracket, step for step as SciPy's `optimize.brentq` runs it.

The stability model needs two roots a run (the gain crossover, the phase crossover).
Importing `scipy.optimize` for them costs ~0.2 s of CPU per process, more than a short
replay's whole summary; this is the same method in a few lines. It takes the same steps
in the same order on the same floats as SciPy's C implementation (Brent, "Algorithms for
Minimization without Derivatives", 1973, ch. 4: inverse quadratic interpolation or the
secant step when it is short enough, bisection otherwise), so the root is the same
double; `tests/property/test_brent.py` checks that against SciPy.
"""

from __future__ import annotations

import math
from collections.abc import Callable

XTOL = 2e-12  # SciPy's defaults
RTOL = 4 * 2.220446049250313e-16  # 4 x machine epsilon
MAXITER = 100


def brentq(f: Callable[[float], float], a: float, b: float, xtol: float = XTOL,
           rtol: float = RTOL, maxiter: int = MAXITER) -> float:
    """A root of `f` in [a, b], where f(a) and f(b) differ in sign.

    Raises ValueError when they do not, and RuntimeError when `maxiter` steps do not
    narrow the bracket to `xtol + rtol * |root|`."""
    xpre, xcur = float(a), float(b)
    fpre, fcur = float(f(xpre)), float(f(xcur))
    if fpre == 0.0:
        return xpre
    if fcur == 0.0:
        return xcur
    if math.copysign(1.0, fpre) == math.copysign(1.0, fcur):
        raise ValueError("f(a) and f(b) must have different signs")
    xblk = fblk = spre = scur = 0.0
    for _ in range(maxiter):
        if fpre != 0.0 and fcur != 0.0 and (
                math.copysign(1.0, fpre) != math.copysign(1.0, fcur)):
            xblk, fblk = xpre, fpre
            spre = scur = xcur - xpre
        if abs(fblk) < abs(fcur):  # keep the best guess in xcur
            xpre, xcur, xblk = xcur, xblk, xcur
            fpre, fcur, fblk = fcur, fblk, fcur
        delta = (xtol + rtol * abs(xcur)) / 2
        sbis = (xblk - xcur) / 2
        if fcur == 0.0 or abs(sbis) < delta:
            return xcur
        stry = math.inf  # no interpolated step: bisect
        if abs(spre) > delta and abs(fcur) < abs(fpre):
            try:
                if xpre == xblk:  # secant
                    stry = -fcur * (xcur - xpre) / (fcur - fpre)
                else:  # inverse quadratic interpolation
                    dpre = (fpre - fcur) / (xpre - xcur)
                    dblk = (fblk - fcur) / (xblk - xcur)
                    stry = -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))
            except ZeroDivisionError:  # C's quotient is an infinity or a NaN: it bisects
                stry = math.inf
        if 2 * abs(stry) < min(abs(spre), 3 * abs(sbis) - delta):
            spre, scur = scur, stry  # a short step: take it
        else:
            spre = scur = sbis
        xpre, fpre = xcur, fcur
        if abs(scur) > delta:
            xcur += scur
        else:
            xcur += delta if sbis > 0 else -delta
        fcur = float(f(xcur))
    raise RuntimeError(f"brentq: no convergence in {maxiter} iterations")
