"""A worker layout's measured step terms as arrays, built once, read per step.

`costmodel.measured.compose` prices a step from the tables in milliseconds of
interpolation per call; a replay prices millions of steps. So each term is
evaluated once per worker layout on grids of the quantity it varies with
(`compose.Kind`), summed by kind into curves, and a step is read off them by
linear interpolation:

- a rank's tokens, the expert group's tokens and a rank's sequences: one knot per
  integer up to `EXACT_KNOTS` (a decode batch is priced exactly), then
  `KNOTS_PER_OCTAVE` knots an octave up to `MAX_TOKENS`;
- the attention kernel over (sequences, tokens per sequence) of one rank: a
  grid of sequence knots by length knots (the tables' own axes are powers of two),
  cut where a rank would hold more KV tokens than its GPUs' whole memory
  (`rank_kv_limit`, at least `MAX_RANK_KV_TOKENS`): a step there cannot run.

Between knots the tables themselves are linear in the varying quantity (GEMM over
m, MoE over tokens, collectives over bytes, decode attention over KV length), so
the curves reproduce the direct composition to a fraction of a percent
(`tests/unit/test_measured_source.py`). A prefill chunk of `n` new tokens after a
cached prefix of `c` costs the attention of a causal prompt of `c + n` tokens less
that of one of `c` tokens (the new queries' share of the triangle).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from costmodel.measured.compose import Kind, Phase, StepShape, StepTerms
from costmodel.measured.ops import NotCovered

EXACT_KNOTS = 1024
KNOTS_PER_OCTAVE = 16
MAX_TOKENS = 2 ** 24
# The attention grid: sequences up to 2^12 and tokens per sequence up to 2^20 on one rank,
# each 1-8 exactly, then 4 (sequences) and 8 (lengths) knots an octave.
MAX_SEQUENCES = 2 ** 12
MAX_LENGTH = 2 ** 20
MAX_RANK_KV_TOKENS = 2 ** 22


def rank_kv_limit(hbm_bytes: float, kv_bytes_per_token_per_gpu: float) -> float:
    """KV tokens one attention rank could hold if its GPUs held nothing else, with a
    quarter to spare, and at least `MAX_RANK_KV_TOKENS`: the attention grid's reach."""
    return max(float(MAX_RANK_KV_TOKENS), 1.25 * hbm_bytes / kv_bytes_per_token_per_gpu)


def _knots(exact: int, per_octave: int, top: int) -> np.ndarray:
    steps = round(float(np.log2(top / exact)) * per_octave)
    geometric = exact * 2.0 ** (np.arange(1, steps + 1) / per_octave)
    return np.unique(np.concatenate([np.arange(1, exact + 1, dtype=float), np.round(geometric)]))


TOKEN_KNOTS = _knots(EXACT_KNOTS, KNOTS_PER_OCTAVE, MAX_TOKENS)
SEQUENCE_KNOTS = _knots(8, 4, MAX_SEQUENCES)
LENGTH_KNOTS = np.concatenate([[0.0], _knots(16, 8, MAX_LENGTH)])


class OutOfRange(ValueError):
    """A step outside the grids a layout was priced on (misuse: no worker holds it)."""


class Curve:
    """A piecewise-linear curve over sorted knots. Floats are read by bisection on
    Python lists (a step reads a few points; `np.interp` on one float costs ~1 us more
    than the whole lookup), arrays by `np.interp`: the same linear interpolation."""

    __slots__ = ("_x", "_y", "x", "y")

    def __init__(self, x: np.ndarray, y: np.ndarray):
        if np.isnan(y).any():
            raise ValueError("a curve needs a value at every knot")
        self.x, self.y = x, y
        self._x, self._y = x.tolist(), y.tolist()

    def at(self, v: float) -> float:
        x = self._x
        i = bisect_right(x, v) - 1
        if i < 0 or v > x[-1]:
            raise OutOfRange(f"{v} outside the priced range [{x[0]}, {x[-1]}]")
        if i == len(x) - 1:
            return self._y[i]
        y0 = self._y[i]
        return y0 + (self._y[i + 1] - y0) * ((v - x[i]) / (x[i + 1] - x[i]))

    def at_array(self, v) -> np.ndarray:
        v = np.asarray(v, dtype=float)
        if v.size and (v.min() < self.x[0] or v.max() > self.x[-1]):
            raise OutOfRange(f"[{v.min()}, {v.max()}] outside the priced range "
                             f"[{self.x[0]}, {self.x[-1]}]")
        return np.interp(v, self.x, self.y)


class Grid2:
    """Attention time over (sequences, tokens per sequence) on one rank: bilinear
    between knots; NaN past the rank's KV limit (a query there raises)."""

    def __init__(self, seqs: np.ndarray, lengths: np.ndarray, values: np.ndarray):
        self.seqs, self.lengths, self.values = seqs, lengths, values
        self._seqs = seqs.tolist()
        self._rows = [Curve(lengths[: int(np.sum(~np.isnan(r)))], r[~np.isnan(r)])
                      for r in values]

    def _bracket(self, b: float) -> tuple[int, float]:
        s = self._seqs
        j = bisect_right(s, b) - 1
        if j < 0 or b > s[-1]:
            raise OutOfRange(f"{b} sequences outside the priced range [{s[0]}, {s[-1]}]")
        if j == len(s) - 1:
            return j, 0.0
        return j, (b - s[j]) / (s[j + 1] - s[j])

    def at(self, b: float, length: float) -> float:
        j, w = self._bracket(b)
        lo = self._rows[j].at(length)
        if w == 0.0:
            return lo
        return lo + (self._rows[j + 1].at(length) - lo) * w

    def row(self, b: float, lengths) -> np.ndarray:
        """At `b` sequences over an array of lengths."""
        j, w = self._bracket(b)
        lo = self._rows[j].at_array(lengths)
        if w == 0.0:
            return lo
        return lo + (self._rows[j + 1].at_array(lengths) - lo) * w


@dataclass(frozen=True)
class PhaseCurves:
    """One phase's step terms of one worker layout, summed by what they vary with."""

    tokens: Curve  # a rank's tokens: seconds
    group: Curve  # the expert group's tokens
    sequences: Curve  # a rank's sequences
    attention: Grid2  # one layer's attention kernel, times `layers`
    layers: int
    # Side-stream overlap (decode on MLA + MoE): max(side(tokens), main(tokens) +
    # main_group(group)) is added; None: no overlap.
    side: Curve | None = None
    main: Curve | None = None
    main_group: Curve | None = None

    def rank_s(self, tokens: float, sequences: float, attention_s: float) -> float:
        """A rank's own terms: its tokens' kernels, its LM head, its attention (one layer's,
        summed over its requests)."""
        return self.tokens.at(tokens) + self.sequences.at(sequences) + self.layers * attention_s

    def group_s(self, tokens: float, group_tokens: float) -> float:
        """The expert group's terms, with the side stream of the rank with `tokens`."""
        g = self.group.at(group_tokens)
        if self.side is None:
            return g
        return g + max(self.side.at(tokens), self.main.at(tokens) + self.main_group.at(group_tokens))

    def chunk_attention_s(self, b: float, new_tokens: float, cached_tokens: float) -> float:
        """One layer's attention of `b` sequences each filling `new_tokens` after
        `cached_tokens`: the causal prompt of both less that of the prefix."""
        full = self.attention.at(b, cached_tokens + new_tokens)
        return full - self.attention.at(b, cached_tokens) if cached_tokens else full


def _sum(step: StepTerms, kind: Kind, leave_out=()) -> np.ndarray:
    parts = [v for k, v in step.terms.items() if step.kinds[k] is kind and k not in leave_out]
    return np.sum(parts, axis=0) if parts else np.zeros(len(TOKEN_KNOTS))


def phase_curves(terms, attention, layers: int, phase: Phase,
                 kv_limit: float = MAX_RANK_KV_TOKENS) -> PhaseCurves | dict[str, NotCovered]:
    """Evaluate `terms(shape)` (a `compose` term builder's result, every term but the
    attention kernel) on the knots and `attention(batch, lengths)` on the grid; the curves,
    or what the tables do not cover."""
    knots = TOKEN_KNOTS
    step: StepTerms = terms(StepShape(tokens=knots, group_tokens=knots, sequences=knots))
    if step.missing:
        return dict(step.missing)
    # Decode attention is read at the KV length before the step (at least 1), prefill's
    # at the prompt's length (0: no attention).
    lengths = LENGTH_KNOTS[1:]
    b, s = np.meshgrid(SEQUENCE_KNOTS, lengths, indexing="ij")
    live = b * s <= kv_limit
    # One knot past the cut along each axis, so that a query just under it interpolates
    # between four priced corners.
    live[:, 1:] |= live[:, :-1]
    live[1:, :] |= live[:-1, :]
    values = np.full(b.shape, np.nan)
    priced = attention(b[live], s[live])
    if isinstance(priced, NotCovered):
        return {"attention": priced}
    values[live] = priced
    if phase is Phase.PREFILL:
        values = np.concatenate([np.zeros((len(SEQUENCE_KNOTS), 1)), values], axis=1)
        lengths = LENGTH_KNOTS
    grid = Grid2(SEQUENCE_KNOTS, lengths, values)
    if step.overlap is None:
        return PhaseCurves(Curve(knots, _sum(step, Kind.TOKENS)), Curve(knots, _sum(step, Kind.GROUP)),
                           Curve(knots, _sum(step, Kind.SEQUENCES)), grid, layers)
    side, mains = step.overlap
    leave = (side, *mains)
    main_tokens = np.sum([step.terms[k] for k in mains if step.kinds[k] is Kind.TOKENS], axis=0)
    main_group = np.sum([step.terms[k] for k in mains if step.kinds[k] is Kind.GROUP], axis=0)
    return PhaseCurves(Curve(knots, _sum(step, Kind.TOKENS, leave)),
                       Curve(knots, _sum(step, Kind.GROUP, leave)),
                       Curve(knots, _sum(step, Kind.SEQUENCES, leave)), grid, layers,
                       side=Curve(knots, step.terms[side]), main=Curve(knots, main_tokens),
                       main_group=Curve(knots, main_group))
