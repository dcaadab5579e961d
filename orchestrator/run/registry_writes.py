"""Writes to a run's Prometheus registry that say what they wrote.

`RegistryWrites` is the base of `MetricsListener`: it looks each child up once,
writes a value object directly (prometheus_client's `set`, `inc` and `observe`
without their checks and lock: only the run's thread writes, and a scrape of
`/metrics` reads one float), and notes the families it wrote (`changed`) and the
buckets each histogram counted an observation in (`take_observed`), from which
`OpenMetricsRecorder` reads only what can have moved.
"""

from __future__ import annotations

import bisect

from orchestrator.run.metrics import PREFIX, Metrics


class RegistryWrites:
    def __init__(self, metrics: Metrics, base: tuple[str, ...]) -> None:
        self.m, self.base = metrics, base  # base: the label values every series starts with
        self._children: dict[tuple, object] = {}  # labels() costs microseconds: look up once
        self._written: dict[tuple, tuple[object, object]] = {}  # _w's child and family, by key
        # A gauge child's value object and its family, by _c's key.
        self._values: dict[tuple, tuple[object, object]] = {}
        self._rows: dict[tuple, list[tuple]] = {}  # gauges set together (`_row`)
        self._last: dict[object, float] = {}  # totals already turned into increments
        # The families written since the recorder last took them (`changed`): it reads
        # those only, the rest are as it last found them. Every write to the registry
        # goes through a method that notes its family here.
        self.touched: set[object] = set()
        # Histogram child -> buckets observed in (`_observe_in`), kept only for a recorder
        # that takes them (`take_observed`); None: not kept.
        self.observed: dict[object, list[int]] | None = None

    def take_observed(self) -> dict[object, list[int]]:
        """The buckets each histogram child counted an observation in since the last call,
        by position; the recorder's `observed` (OpenMetricsRecorder). The log starts at
        the first call (the recorder's first reading reads every histogram in full)."""
        observed, self.observed = self.observed, {}
        return observed or {}

    def changed(self) -> set[object]:
        """The families (metric objects) written since the last call, which may have
        moved; the recorder's `changed` (OpenMetricsRecorder)."""
        touched, self.touched = self.touched, set()
        return touched

    def _c(self, name: str, *labels: str):
        """A child; a new one touches its family (a series came)."""
        key = (name, *labels)
        child = self._children.get(key)
        if child is None:
            family = self.m[PREFIX + name]
            self.touched.add(family)
            child = self._children[key] = family.labels(*self.base, *labels)
        return child

    def _w(self, name: str, *labels: str):
        """A child the caller writes to: its family is touched."""
        key = (name, *labels)
        got = self._written.get(key)
        if got is None:
            got = self._written[key] = (self._c(name, *labels), self.m[PREFIX + name])
        self.touched.add(got[1])
        return got[0]

    def _set(self, value: float, name: str, *labels: str) -> None:
        """Set a gauge, as `Gauge.set` does but without its checks and lock: a reading
        sets about a hundred of them. Only this thread writes; a scrape reads one float.
        Its family is touched only when the value moved."""
        key = (name, *labels)
        got = self._values.get(key)
        if got is None:
            got = self._values[key] = (self._c(name, *labels)._value, self.m[PREFIX + name])
        v, family = got
        value = float(value)
        if v._value != value:
            v._value = value
            self.touched.add(family)

    def _row(self, names: tuple[str, ...], labels: tuple[str, ...]) -> list[tuple]:
        """The value objects and families of gauges `names` under `labels`, for `_put`."""
        row = self._rows.get((names, labels))
        if row is None:
            row = self._rows[names, labels] = [
                (self._c(name, *labels)._value, self.m[PREFIX + name]) for name in names]
        return row

    def _put(self, row: list[tuple], numbers) -> None:
        """Set a row of gauges (`_row`) to `numbers`, as `_set` each."""
        touched = self.touched
        for (v, family), value in zip(row, numbers, strict=True):
            value = float(value)
            if v._value != value:
                v._value = value
                touched.add(family)

    def _add(self, amount: float, name: str, *labels: str) -> None:
        """Increase a counter by `amount` >= 0 (as `Counter.inc`, without its checks and
        lock, as `_set`)."""
        self._w(name, *labels)._value._value += amount

    def _observe_in(self, child, value: float) -> None:
        """Observe `value` in a histogram child, as `Histogram.observe` does (the sum, and
        the first bucket whose bound is >= value; none for NaN) but finding the bucket by
        bisection, not a walk over ~150 bounds, and without the locks (as `_set`); its
        family is touched by the caller."""
        child._sum._value += value
        bounds = child._upper_bounds
        if value <= bounds[-1]:
            i = bisect.bisect_left(bounds, value)
            child._buckets[i]._value += 1
            if self.observed is not None:
                self.observed.setdefault(child, []).append(i)

    def _inc_to(self, key: object, total: float, name: str, *labels: str) -> None:
        """Increase a counter so that it has grown by `total` since the run began (as
        `Counter.inc` does but without its checks and lock, as `_set`)."""
        delta = total - self._last.get(key, 0.0)
        if delta > 0:
            self._w(name, *labels)._value._value += delta
            self._last[key] = total
