"""Time series sampled every fast-loop period: what the report plots and the summary reads.

Kept run-length: a record stands for `ticks[i]` consecutive samples, one period
apart from `time_s[i]`, with the same values (an idle span the fast loop skipped:
nothing queued or in flight; its per-period counts are 0 and its latencies NaN).
The columns hold records, numbers as typed arrays (8 bytes a value: a run of a
million calls keeps a few million records), the latency percentiles as sparse
columns (only the records whose period completed a call); `array(name)` expands
them to one value per sample.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field

import numpy as np

from workers.request import LatencyPart, Request

QUANTILES = (50, 90, 99)


def percentile(ordered: list[float], q: float) -> float:
    """`np.percentile(values, q)` (linear method) of `ordered` = sorted(values), finite
    values, in Python floats: numpy's own steps (index (n - 1) q/100, floor, the weight,
    and its two-sided interpolation), without its per-call cost on a period's few calls."""
    n = len(ordered)
    index = (n - 1) * (q / 100)
    if index >= n - 1:
        return float(ordered[-1])
    below = math.floor(index)
    a, b = ordered[below], ordered[below + 1]
    gamma = index - below
    diff = b - a
    return float(b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma)


# (part, its columns "<part>_p<q>_s" in QUANTILES order), parts in LatencyPart order.
_BREAKDOWN_COLUMNS = tuple((part, tuple(f"{part.key}_p{q}_s" for q in QUANTILES))
                           for part in LatencyPart)


def _floats() -> array:
    return array("d")


class SparseColumn:
    """A float column that is NaN at most records (a period's latency percentiles: NaN
    unless a call completed in it), kept as the records that are not and their values:
    16 bytes each of those, none for the rest (a dense column: 8 bytes every record).
    Reads as the dense column would: `len`, indexing, slices and iteration as Python
    floats, `np.asarray` as float64.

    `records`: the count of records, a one-element list; by default the column's own.
    Columns appended to together (a series' latency parts) share one, which their group
    moves once a record (`Series.add_breakdown`, `put`): a record without a value then
    costs nothing per column. Such a column is appended to only through its group."""

    __slots__ = ("_at", "_records", "_values")

    def __init__(self, records: list[int] | None = None) -> None:
        self._at = array("q")  # the records that hold a value, ascending
        self._values = array("d")
        self._records = [0] if records is None else records

    def append(self, value: float) -> None:
        """A record of its own (a column that shares its count: `put`)."""
        records = self._records
        if value == value:  # NaN is what a record without one reads
            self._at.append(records[0])
            self._values.append(value)
        records[0] += 1

    def put(self, value: float) -> None:
        """The value of the record being added to the group (its count not moved yet)."""
        if value == value:
            self._at.append(self._records[0])
            self._values.append(value)

    @property
    def _n(self) -> int:
        return self._records[0]

    def __len__(self) -> int:
        return self._n

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = np.full(self._n, np.nan)
        out[np.asarray(self._at, dtype=np.int64)] = np.asarray(self._values, dtype=np.float64)
        return out if dtype is None else out.astype(dtype, copy=False)

    def tolist(self) -> list[float]:
        return self.__array__().tolist()

    def __iter__(self):
        return iter(self.tolist())

    def __getitem__(self, key):
        if isinstance(key, slice):
            return self.__array__()[key].tolist()
        return float(self.__array__()[key])


def _ints() -> array:
    return array("q")


@dataclass
class Series:
    time_s: array = field(default_factory=_floats)
    decode_occupancy: array = field(default_factory=_floats)  # running / slots, true value
    decode_running: array = field(default_factory=_ints)
    decode_slots: array = field(default_factory=_ints)  # the accepting workers'
    decode_draining: array = field(default_factory=_ints)  # on draining decode workers
    backlog: array = field(default_factory=_ints)  # admitted, not yet decoding
    ready_depth: array = field(default_factory=_ints)
    admission_queue: array = field(default_factory=_ints)  # faced by the sample's decision
    held: array = field(default_factory=_ints)  # left queued by the decision (docs/metrics.md)
    upstream_waiting: array = field(default_factory=_ints)  # held + ready
    admitted: array = field(default_factory=_ints)  # in the period just ended
    completed: array = field(default_factory=_ints)
    ttft_mean_s: array = field(default_factory=_floats)  # calls whose first token came
    reason: list[str] = field(default_factory=list)
    admit: array = field(default_factory=_ints)  # the decision's admit (all may not be)
    in_flight: array = field(default_factory=_ints)
    submitted_total: array = field(default_factory=_ints)
    completed_total: array = field(default_factory=_ints)
    rejected_total: array = field(default_factory=_ints)
    workers_by_pool: list[dict[str, int]] = field(default_factory=list)
    # Per period, over the calls completed in it: "<part>_<p50|p90|p99>_s" -> values (NaN
    # when none completed: sparse columns), parts as in the summary's latency_breakdown_s.
    latency_breakdown_s: dict[str, SparseColumn] = field(default_factory=dict)
    ticks: array = field(default_factory=_ints)  # samples each record stands for
    period_s: float = 1.0  # between samples

    def __post_init__(self) -> None:
        # The latency columns' shared count of records (SparseColumn: one move a record).
        self._breakdown_records = [0]
        # Records up to the last one standing for other than one sample (a skipped
        # span's): `tail` of the samples after it reads them as they are.
        self._spans_end = 0

    # Per-period counts and latencies: 0 and NaN in a skipped idle span.
    _PERIOD_COUNTS = ("admitted", "completed")

    def repeat_idle(self, first_s: float, ticks: int, reason: str, admit: int) -> None:
        """`ticks` idle samples from `first_s` on, each equal to the last record's state
        with nothing admitted or completed in its period."""
        for name in ("decode_occupancy", "decode_running", "decode_slots", "decode_draining",
                     "backlog",
                     "ready_depth", "admission_queue", "held", "upstream_waiting", "in_flight",
                     "submitted_total", "completed_total", "rejected_total",
                     "workers_by_pool"):
            values = getattr(self, name)
            values.append(values[-1])
        for name in self._PERIOD_COUNTS:
            getattr(self, name).append(0)
        self.ttft_mean_s.append(float("nan"))
        self._breakdown_records[0] += len(self.latency_breakdown_s) > 0  # NaN: nothing kept
        self.time_s.append(first_s)
        self.reason.append(reason)
        self.admit.append(admit)
        self.ticks.append(ticks)
        if ticks != 1:
            self._spans_end = len(self.ticks)


    def add_breakdown(self, done: list[Request]) -> None:
        """One period's latency parts over the calls `done` in it."""
        cols = self.latency_breakdown_s
        records = self._breakdown_records
        if not cols:  # from the first record on, a column per part and quantile
            for _, names in _BREAKDOWN_COLUMNS:
                for name in names:
                    cols[name] = SparseColumn(records)
        if not done:  # a record without a value: NaN, nothing stored
            records[0] += 1
            return
        if len(done) == 1:  # every percentile of one value is that value
            parts = done[0].parts_s
            n = records[0]
            for part, names in _BREAKDOWN_COLUMNS:
                value = float(parts[part])
                if value == value:
                    for name in names:
                        col = cols[name]  # SparseColumn.put, inline
                        col._at.append(n)
                        col._values.append(value)
            records[0] = n + 1
            return
        rows = [r.parts_s for r in done]
        n = records[0]
        for part, names in _BREAKDOWN_COLUMNS:
            values = sorted([row[part] for row in rows])
            for q, name in zip(QUANTILES, names, strict=True):
                value = percentile(values, q)
                if value == value:  # SparseColumn.put, inline
                    col = cols[name]
                    col._at.append(n)
                    col._values.append(value)
        records[0] = n + 1

    def array(self, name: str) -> np.ndarray:
        """One value per sample, records expanded."""
        if name in self.latency_breakdown_s:
            values = np.asarray(self.latency_breakdown_s[name], dtype=np.float64)
        else:
            values = np.asarray(getattr(self, name), dtype=np.float64)
        ticks = np.asarray(self.ticks, dtype=np.int64)
        if len(ticks) != len(values) or not (ticks > 1).any():
            return values
        out = np.repeat(values, ticks)
        if name == "time_s":  # a skipped span's samples are one period apart
            starts = np.repeat(np.cumsum(ticks) - ticks, ticks)
            out = out + (np.arange(len(out)) - starts) * self.period_s
        return out

    def tail(self, name: str, samples: int) -> np.ndarray:
        """The last `samples` samples of `name`, expanded from the records they need."""
        ticks = self.ticks
        if samples > 0 and len(ticks) - samples >= self._spans_end:
            # The last `samples` records are one sample each (no skipped span among them).
            return np.asarray(getattr(self, name)[-samples:], dtype=np.float64)
        need, i = 0, len(ticks)
        while i > 0 and need < samples:
            i -= 1
            need += self.ticks[i]
        values = np.asarray(getattr(self, name)[i:], dtype=np.float64)
        return np.repeat(values, self.ticks[i:])[-samples:]

    def __len__(self) -> int:
        """Samples taken or skipped (records expanded); `records` counts the records."""
        return sum(self.ticks) if len(self.ticks) == len(self.time_s) else len(self.time_s)

    @property
    def records(self) -> int:
        return len(self.time_s)
