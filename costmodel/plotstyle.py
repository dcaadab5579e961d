"""How every figure of the project looks: one palette, one colour per name, legible text.

Every PNG (the sweep's frontiers, the compare and demo reports, sweep-replay's
frontiers) takes its colours and fonts from here, so a controller has the same
colour in every plot.

- Colours: Okabe & Ito's palette ("Color Universal Design", 2008), told apart
  with the common colour-vision deficiencies, and one more (`PALETTE`). Each built-in admission
  controller has its own (`CONTROLLER_COLOURS`); any other name (a user's
  controller, a cluster, a KV policy) gets the next palette colour no
  built-in controller uses, in the order names are first seen, then the
  built-ins' colours again with a dashed line once those run out
  (`Colours.style`).
- Text: sizes fixed in points for figures shown at about their pixel size
  (`apply()`), labels never cut (`save` crops to the drawn area, bbox "tight").
- Log axes: labels at 1-9, 1-2-5 or 1 of each decade, the densest that
  fits (`log_ticks`), so an axis spanning a decade or less is still read.
"""

from __future__ import annotations

from pathlib import Path

# Okabe & Ito (2008), in the order names take them.
BLACK = "#000000"
ORANGE = "#E69F00"
SKY_BLUE = "#56B4E9"
BLUISH_GREEN = "#009E73"
YELLOW = "#F0E442"
BLUE = "#0072B2"
VERMILLION = "#D55E00"
REDDISH_PURPLE = "#CC79A7"
OKABE_ITO = (BLACK, ORANGE, SKY_BLUE, BLUISH_GREEN, YELLOW, BLUE, VERMILLION, REDDISH_PURPLE)
# One more when Okabe & Ito's eight are spent: Paul Tol's "wine" (his muted scheme, also
# told apart with the common colour-vision deficiencies), darker than reddish purple.
WINE = "#882255"
# And Tol's "olive" from the same scheme, for the no-control baseline.
OLIVE = "#999933"
PALETTE = (*OKABE_ITO, WINE, OLIVE)

# The built-in admission controllers (orchestrator.control.policies): red for the essay's
# anti-pattern, blue for its remedy, green for its predictive variant, orange for today's
# engines, reddish purple for the delay-compensated controller and wine for its variant
# per fill pool, sky blue for buffered's variant on the binding resource, olive for no
# control at all.
CONTROLLER_COLOURS = {"retire": VERMILLION, "buffered": BLUE, "predictive": BLUISH_GREEN,
                      "local": ORANGE, "smith": REDDISH_PURPLE, "binding": SKY_BLUE,
                      "smith-pools": WINE, "admit-all": OLIVE}
# What other names take, in order: the palette less the built-ins' colours; yellow last
# (faint on white).
OTHER_COLOURS = (BLACK, YELLOW)
# Neutral grey for what is not a series (dominated points, bands, reference lines).
GREY = "#999999"

FONT_SIZES = {"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11,
              "xtick.labelsize": 10, "ytick.labelsize": 10, "legend.fontsize": 10,
              "figure.titlesize": 13}


class Colours:
    """Name -> (colour, line style): built-in controllers theirs, other names the next
    free colour in the order they are asked for. One per figure (or per report)."""

    def __init__(self, names=()) -> None:
        self._given: dict[str, tuple[str, str]] = {}
        for name in names:
            self.style(name)

    def style(self, name: str) -> tuple[str, str]:
        if name in self._given:
            return self._given[name]
        if name in CONTROLLER_COLOURS:
            style = (CONTROLLER_COLOURS[name], "-")
        else:
            others = sum(1 for n in self._given if n not in CONTROLLER_COLOURS)
            pool = OTHER_COLOURS + tuple(CONTROLLER_COLOURS.values())
            style = (pool[others % len(pool)],
                     "-" if others < len(OTHER_COLOURS) else "--")
        self._given[name] = style
        return style

    def colour(self, name: str) -> str:
        return self.style(name)[0]


def colour_of(name: str) -> str:
    """A built-in controller's colour; another name's when it is the first one seen."""
    return Colours().colour(name)


def apply() -> None:
    """Set matplotlib's text sizes (call after `matplotlib.use`, before plotting)."""
    import matplotlib

    matplotlib.rcParams.update(FONT_SIZES)


def log_ticks(axis, max_labels: int = 8) -> None:
    """Labels on a log axis at the densest of 1-9, 1-2-5 or 1 of each decade that puts
    at most `max_labels` labels in view, or evenly spaced round values when those give
    fewer than three (matplotlib labels only decades, which leaves one label, or none,
    on an axis spanning less than a decade); written short (20, 0.5, 2k). Call once the
    axis's limits are final."""
    import math

    import numpy as np
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter

    lo, hi = sorted(axis.get_view_interval())
    if lo <= 0 or hi <= 0:
        return
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    ticks: list[float] = []
    for subs in ((1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 2, 5), (1,), ()):
        ticks = [m * 10.0 ** e for e in decades for m in subs
                 if lo <= m * 10.0 ** e * (1 + 1e-9) and m * 10.0 ** e <= hi * (1 + 1e-9)]
        if len(ticks) <= max_labels:
            break
    if not ticks:  # more decades than labels: every k-th decade
        k = math.ceil(len(decades) / max_labels)
        ticks = [10.0 ** e for e in decades[::k] if lo <= 10.0 ** e <= hi]
    if len(ticks) < 3:  # a fraction of a decade: evenly spaced round values
        ticks = [t for t in MaxNLocator(nbins=5).tick_values(lo, hi) if lo <= t <= hi]
    axis.set_major_locator(FixedLocator(np.array(ticks)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: _short(v)))
    axis.set_minor_formatter(NullFormatter())


def _short(value: float) -> str:
    """20, 0.5, 2k, 1.5M: a tick label that stays narrow."""
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def save(fig, path: Path | str | object, dpi: int = 100, **kwargs) -> None:
    """Save with every label inside the image (bbox "tight"); `path` a file or buffer."""
    fig.savefig(path, dpi=dpi, bbox_inches="tight", pad_inches=0.15, **kwargs)
