"""Inter-token latency as the client sees it: the gap before every token a decode step
streams, from the steps that produced it.

A token reaches the client when the step that produced it ends; its gap is the time
since the same sequence's previous token. So a decode step that carries a prefill chunk
(a mixed worker's) shows as a spike in every decoding sequence's gaps, and a sequence
preempted and resumed has one gap spanning its stall: from its last token before the
preemption to its first after it (the wait, the KV reload and the recompute). With
multi-token prediction a step's gap is shared by the k tokens it yields for a sequence:
k tokens of gap / k each, as SGLang's `bench_serving` counts a streamed chunk of k
tokens (https://github.com/sgl-project/sglang/pull/12064). A call's first token
(the fill's last logits, streamed when the call joins a decode batch) has no gap: that
is TTFT's.

Decode advances many steps in one jump, so a run is recorded as what it is, cheaply:
its start, its steps' ends and how many sequences each step served (`run`), appended
to flat arrays in a few C-level operations. The gaps are differences of those ends, and
each counts once per sequence: the histogram is built from them in one numpy pass
(`GapHistogram`, log buckets 0.1% wide holding their tokens and the sum of their gaps),
folded in as the buffer grows, so a long replay keeps a fixed amount (the histogram's
~400 KB, at most ~2 MB of records before a fold), not a value per token. `keep=True` keeps every record instead (a benchmark's window is known only once
the run is over: `histogram(lo_s, hi_s)`, `tokens(lo_s, hi_s)`).

Exceptions to "every sequence of the step had its previous token at the step's start"
are corrections of a single sequence: a sequence resumed after a stall (`stall`,
`resumed`) has its first step's gap counted from its stall instead (one token added at
that gap, one removed at the step's).
"""

from __future__ import annotations

import math
from array import array

import numpy as np

# Buckets: [MIN_GAP_S * RATIO**k, MIN_GAP_S * RATIO**(k+1)); gaps below the first go
# to bucket 0, above the last to the last (their means stay exact: sums are kept).
MIN_GAP_S = 1e-6
MAX_GAP_S = 1e5
RATIO = 1.001
BUCKETS = math.ceil(math.log(MAX_GAP_S / MIN_GAP_S) / math.log(RATIO))
_LOG_RATIO = math.log(RATIO)
# Flat values kept before they are folded into the histogram (keep=False).
FOLD_AT = 1 << 16


class GapHistogram:
    """Tokens and the sum of their gaps per log bucket. A percentile is the mean gap of
    the bucket that holds it: exact where a bucket holds one distinct value, otherwise
    within the bucket's 0.1% width."""

    __slots__ = ("sums", "tokens")

    def __init__(self) -> None:
        self.tokens = np.zeros(BUCKETS)
        self.sums = np.zeros(BUCKETS)

    def add(self, gaps_s: np.ndarray, weights: np.ndarray) -> None:
        """`weights[i]` tokens (negative: a correction) of gap `gaps_s[i]` each."""
        if not len(gaps_s):
            return
        gaps = np.asarray(gaps_s, dtype=np.float64)
        w = np.asarray(weights, dtype=np.float64)
        k = np.floor(np.log(np.maximum(gaps, MIN_GAP_S) / MIN_GAP_S) / _LOG_RATIO)
        k = np.clip(k, 0, BUCKETS - 1).astype(np.intp)
        self.tokens += np.bincount(k, weights=w, minlength=BUCKETS)
        self.sums += np.bincount(k, weights=w * gaps, minlength=BUCKETS)

    @property
    def count(self) -> float:
        return float(self.tokens.sum())

    def mean_s(self) -> float | None:
        n = self.count
        return float(self.sums.sum() / n) if n > 0 else None

    def percentile(self, q: float) -> float | None:
        """The gap below or at which `q`% of the tokens lie (the inverse of the CDF:
        the first bucket whose running count reaches q% of all), as that bucket's mean
        gap; None with no token."""
        n = self.count
        if n <= 0:
            return None
        # Round-off of the corrections' subtractions: a bucket emptied to within 1e-6.
        held = np.where(self.tokens > 1e-6, self.tokens, 0.0)
        k = int(np.searchsorted(np.cumsum(held), q / 100.0 * held.sum() * (1 - 1e-12)))
        k = min(k, BUCKETS - 1)
        while held[k] <= 0:  # q = 0 lands before the first token's bucket
            k += 1
        return float(self.sums[k] / self.tokens[k])

    def percentiles(self) -> dict[str, float | None]:
        return {f"p{q}": self.percentile(q) for q in (50, 90, 99)}


class TokenGaps:
    """One run's recorder, shared by its decode and mixed workers (the call sites are
    `workers.decode.DecodeWorker` and `workers.mixed.MixedWorker`)."""

    def __init__(self, keep: bool = False) -> None:
        self.keep = keep
        # Runs: each is its start then its steps' ends in `_ends`; its step count in
        # `_steps`, the sequences each of its steps served in `_seqs`.
        self._ends = array("d")
        self._steps = array("q")
        self._seqs = array("d")
        # Single values: (time the tokens were streamed, gap, tokens), corrections and
        # multi-token steps.
        self._at = array("d")
        self._gap = array("d")
        self._weight = array("d")
        self._folded = GapHistogram()
        # Sequences out of every batch since their last token (preempted, or handed back
        # by a lost worker): call id -> that token's time.
        self.stalled: dict[int, float] = {}

    # -- recording (the workers' hot paths) -----------------------------------------
    def run(self, start_s: float, ends, steps: int, sequences: int) -> None:
        """`steps` steps ran from `start_s`, ending at `ends[:steps]` (a list or an
        array), each streaming one token to each of `sequences` sequences."""
        if steps <= 0 or sequences <= 0:
            return
        if len(self._ends) > FOLD_AT and not self.keep:
            self._fold()
        e = self._ends
        e.append(start_s)
        if type(ends) is list:
            e.extend(ends if steps == len(ends) else ends[:steps])
        else:
            e.frombytes(np.ascontiguousarray(ends[:steps], dtype=np.float64).tobytes())
        self._steps.append(steps)
        self._seqs.append(sequences)

    def tokens_at(self, at_s, gaps_s, weights) -> None:
        """Tokens streamed at `at_s[i]`: `weights[i]` of them with gap `gaps_s[i]` each
        (arrays or lists of one length; a negative weight corrects an earlier record)."""
        if len(self._at) > FOLD_AT and not self.keep:
            self._fold()
        for buf, values in ((self._at, at_s), (self._gap, gaps_s), (self._weight, weights)):
            buf.frombytes(np.ascontiguousarray(values, dtype=np.float64).tobytes())

    def mtp_run(self, start_s: float, ends: np.ndarray, tokens: np.ndarray) -> None:
        """A multi-token-prediction run: step j ended at `ends[j]`, yielding
        `tokens[j, i]` tokens (0 once sequence i is done) to sequence i; a step's gap is
        shared by the tokens it yields a sequence (module doc)."""
        steps = len(ends)
        if steps == 0:
            return
        ends = np.asarray(ends, dtype=np.float64)
        step_s = np.diff(ends, prepend=start_s)
        k = np.asarray(tokens, dtype=np.int64)
        at, gap, weight = [], [], []
        for n in range(1, int(k.max(initial=0)) + 1):
            seqs = (k == n).sum(axis=1)
            rows = np.flatnonzero(seqs)
            at.append(ends[rows])
            gap.append(step_s[rows] / n)
            weight.append(seqs[rows] * float(n))
        if at:
            self.tokens_at(np.concatenate(at), np.concatenate(gap), np.concatenate(weight))

    def resumed(self, first_end_s: float, start_s: float, stalled_s: float,
                tokens: int = 1) -> None:
        """A resumed sequence's first step (`start_s` to `first_end_s`, `tokens` tokens
        for it) was recorded as if its previous token came at `start_s`; it came at
        `stalled_s`: its gap spans the stall."""
        if stalled_s >= start_s:
            return
        step = first_end_s - start_s
        self.tokens_at((first_end_s, first_end_s),
                       ((first_end_s - stalled_s) / tokens, step / tokens),
                       (float(tokens), -float(tokens)))

    # -- a decode worker's runs (workers.decode, workers.mixed) ------------------------
    def decode_run(self, start_s: float, ends, steps: int, running: list,
                   resumed: dict[int, float]) -> None:
        """A worker's run of `steps` steps, one token a sequence a step, to the
        `running` sequences (before any retires); `resumed`: those of them resumed after
        a stall that stream their first token since (call id -> their last token's
        time), emptied here."""
        self.run(start_s, ends, steps, len(running))
        if resumed and steps > 0:
            self._resumed_first(float(ends[0]), start_s, running, resumed, None)

    def decode_mtp_run(self, start_s: float, ends: np.ndarray, steps: int,
                       gained: np.ndarray, running: list, resumed: dict[int, float]) -> None:
        """`decode_run` with multi-token prediction: `gained[j, i]` the tokens sequence
        i holds more after step j, as drawn; none counts past its output length (as the
        worker's `_advance` counts them)."""
        if steps <= 0:
            return
        remaining = np.array([r.output_tokens - r.generated for r in running],
                             dtype=np.float64)
        got = np.minimum(gained[:steps], remaining[None, :])
        tokens = np.diff(got, axis=0, prepend=0.0)
        self.mtp_run(start_s, ends[:steps], tokens)
        if resumed:
            self._resumed_first(float(ends[0]), start_s, running, resumed, tokens[0])

    def _resumed_first(self, first_end_s: float, start_s: float, running: list,
                       resumed: dict[int, float], first_tokens: np.ndarray | None) -> None:
        index = {r.call_id: i for i, r in enumerate(running)}
        for call_id, stalled_s in resumed.items():
            i = index.get(call_id)
            if i is not None:
                tokens = 1 if first_tokens is None else int(first_tokens[i])
                self.resumed(first_end_s, start_s, stalled_s, tokens)
        resumed.clear()

    # -- reading ------------------------------------------------------------------------
    def _runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every run step's (end time, gap, sequences), flat."""
        ends = np.frombuffer(self._ends, dtype=np.float64)
        if not len(ends):
            empty = np.zeros(0)
            return empty, empty, empty
        steps = np.frombuffer(self._steps, dtype=np.int64)
        gaps = np.diff(ends)
        # A run's values are its start then its ends: the difference from one run's last
        # end to the next run's start is no gap.
        starts = np.cumsum(steps + 1)[:-1]
        keep = np.ones(len(gaps), dtype=bool)
        keep[starts - 1] = False
        return (ends[1:][keep], gaps[keep],
                np.repeat(np.frombuffer(self._seqs, dtype=np.float64), steps))

    def _fold(self) -> None:
        _, gaps, seqs = self._runs()
        self._folded.add(gaps, seqs)
        self._folded.add(np.frombuffer(self._gap, dtype=np.float64),
                         np.frombuffer(self._weight, dtype=np.float64))
        for buf in (self._ends, self._steps, self._seqs, self._at, self._gap, self._weight):
            del buf[:]

    def _window(self, lo_s: float | None, hi_s: float | None):
        at, gaps, seqs = self._runs()
        xat = np.frombuffer(self._at, dtype=np.float64)
        xgap = np.frombuffer(self._gap, dtype=np.float64)
        xw = np.frombuffer(self._weight, dtype=np.float64)
        at, gaps, weights = (np.concatenate((at, xat)), np.concatenate((gaps, xgap)),
                             np.concatenate((seqs, xw)))
        if lo_s is not None or hi_s is not None:
            if self._folded.count:
                raise ValueError("a window needs the records kept (TokenGaps(keep=True))")
            inside = ((at >= (-np.inf if lo_s is None else lo_s))
                      & (at <= (np.inf if hi_s is None else hi_s)))
            gaps, weights = gaps[inside], weights[inside]
        return gaps, weights

    def histogram(self, lo_s: float | None = None, hi_s: float | None = None) -> GapHistogram:
        """The gaps of the tokens streamed in [lo_s, hi_s] (default: all)."""
        gaps, weights = self._window(lo_s, hi_s)
        out = GapHistogram()
        out.tokens += self._folded.tokens
        out.sums += self._folded.sums
        out.add(gaps, weights)
        return out

    def tokens(self, lo_s: float | None = None, hi_s: float | None = None) -> float:
        """Tokens streamed with a gap (every output token but each call's first) in
        [lo_s, hi_s]."""
        _, weights = self._window(lo_s, hi_s)
        return float(weights.sum()) + self._folded.count
