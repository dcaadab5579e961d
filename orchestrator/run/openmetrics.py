"""A virtual-time run's metrics as OpenMetrics text with timestamps (`metrics.om`).

`OpenMetricsRecorder` is a run listener: every `interval_s` simulated seconds
it reads a registry (the one `MetricsListener` feeds; put the recorder after
it in the listeners) and keeps a series' point only when it says something
new: when its value changed since the last reading (with the point of the
reading before, when that was not kept, so a step is as sharp as in a full
sampling, and a `rate()` window holding the change finds two points), and
the run's end. A gauge or a counter unchanged for `HEARTBEAT_S` gets a
heartbeat, under Prometheus' five-minute lookback, so an instant query sees
every series continuously; a counter also every `RATE_HEARTBEAT_S` while
calls are in flight (the readings that find `orch.in_flight()`), so `rate()`
over a one-minute window finds two points and reads 0 while the service
works (over an idle span it reads nothing). Heartbeats repeat the last point
at a reading instant, so they are not kept: `write` lays them in from the
readings (the idle spans the run skips, `on_skip`, included). A histogram
gets none: its buckets are read through `rate()`, and an unchanged
histogram's quantiles have no value anyway; with them histograms would be
most of the file.

A histogram's points list only the buckets that inform a quantile, the same
at every point: from the highest bound no observation of the run reached to
the lowest bound holding all of them, and +Inf. The buckets below were 0 at
every point and those above equal to +Inf at every point (counts only grow),
so `histogram_quantile` over any window interpolates in the same bucket with
or without them, and a file stays small with fine buckets. Which buckets
those are is known at `write`, from the run's last point.
`drop_labels` leaves out every series carrying one of those labels (`--metrics
run`: no per-pool, per-worker or per-link series).

The registry is read directly (its metric objects' values, not `collect()`,
which builds a sample object per bucket), and a point is kept as its values,
given its lines at `write`.

`write` lays the points on a wall-clock base, `start_unix_s` + simulated
time, so that Prometheus, after `promtool tsdb create-blocks-from
openmetrics`, shows the run as if it had happened then. OpenMetrics wants each
family once, each label set's points together and in time order, and a
histogram's buckets, count and sum together in each point: the recorder keeps
one stream per label set, spilled to a file of its own under `spill_dir` when
the points held in memory pass `SPILL_VALUES`, and joins them at `write`. The
same run and base give the same file, byte for byte. The writing is
`OpenMetricsText`'s (`orchestrator.run.openmetrics_text`), the recorder's base.
The series' bookkeeping (`_Family`, `_Series`) is in
`orchestrator.run.openmetrics_series`.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from array import array
from itertools import accumulate
from operator import attrgetter
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from orchestrator.run.openmetrics_series import _Family, _Series
from orchestrator.run.openmetrics_text import _EPS_S, OpenMetricsText
from orchestrator.run.openmetrics_text import open_text as open_text  # read back: re-exported
from orchestrator.run.openmetrics_text import time_range as time_range

# Under Prometheus' default lookback of 5 minutes (--query.lookback-delta, "Staleness" in
# https://prometheus.io/docs/prometheus/latest/querying/basics/): a heartbeat lands on the
# first reading at or after it, within one reading interval (5 s by default), so an
# unchanged series never drops out of an instant query between two of its points.
HEARTBEAT_S = 285.0
# Half of the shortest window the dashboard's rate() and increase() get: Grafana's
# $__rate_interval is at least four scrape intervals of its default 15 s
# (https://grafana.com/docs/grafana/latest/datasources/prometheus/template-variables/).
RATE_HEARTBEAT_S = 30.0
# Values held in memory across all series before they go to the spill files.
SPILL_VALUES = 1_600_000  # 12.8 MB of doubles
_VALUE = attrgetter("_value")  # a prometheus_client value's number, read without its lock
_NUMBER = attrgetter("_value._value")  # a counter's or a gauge's number, likewise
_PLUS_ONE = (1.0).__add__  # a count one more (c + 1, without a Python-level call)
_KINDS = ((Histogram, "histogram"), (Counter, "counter"), (Gauge, "gauge"))


class OpenMetricsRecorder(OpenMetricsText):
    def __init__(self, registry: CollectorRegistry, interval_s: float,
                 spill_dir: Path | None = None, heartbeat_s: float = HEARTBEAT_S,
                 rate_heartbeat_s: float = RATE_HEARTBEAT_S,
                 drop_labels: frozenset[str] = frozenset(),
                 observations=None, changed=None, observed=None) -> None:
        if not interval_s > 0:
            raise ValueError(f"metrics interval must be > 0 s, got {interval_s!r}")
        if not 0 < rate_heartbeat_s <= heartbeat_s:
            raise ValueError(f"metrics heartbeats must be 0 < {rate_heartbeat_s!r} (counters "
                             f"while calls are in flight) <= {heartbeat_s!r} s")
        self.registry, self.interval_s = registry, interval_s
        self.drop_labels = frozenset(drop_labels)
        self.heartbeat_s, self.rate_heartbeat_s = heartbeat_s, rate_heartbeat_s
        # A count of the histograms' observations so far (MetricsListener.observations):
        # while it stands still the histograms are not read again. None: read them always.
        self.observations = observations
        self._observed = None
        # The families written since the last reading (MetricsListener.changed), when
        # one writer feeds the registry and says so: the others are not read again.
        # None: read every family.
        self.changed = changed
        # With `changed`: the buckets each histogram child counted observations in since
        # the last reading (MetricsListener.take_observed), from which a histogram's
        # cumulative counts follow without reading its ~150 buckets. None: read them.
        self.observed = observed
        self.spill_parent = spill_dir  # None: the system's temporary directory
        self._spill: Path | None = None
        self._spill_files = 0
        self._families: list[_Family] = []
        self._collectors = 0  # collectors of the registry the families were taken from
        self._next_s = 0.0
        self.last_s: float | None = None
        self.instants = array("d")  # every reading, skipped spans' included
        self.busy = array("d")  # the readings that found calls in flight
        self.points = 0  # points kept (heartbeats not counted)
        self._held = 0  # values held in memory

    # -- listening ---------------------------------------------------------------------
    def due(self, now_s: float) -> bool:
        """Whether a sample at `now_s` is a reading."""
        return now_s + _EPS_S >= self._next_s

    def on_sample(self, orch, obs, now_s: float) -> None:
        if now_s + _EPS_S >= self._next_s:
            self.scrape(now_s, busy=orch is not None and orch.in_flight() > 0)
            while self._next_s <= now_s + _EPS_S:
                self._next_s += self.interval_s

    def on_skip(self, orch, first_s: float, last_s: float, ticks: int) -> None:
        """The run skipped `ticks` samples from `first_s` to `last_s` (a fast period apart),
        the observation unchanged: keep the points a ticking run would have kept at its
        readings in the span. The registry now holds the span's values: a series that
        moved since the last reading (at a sample between two readings, or a counter the
        skip advanced, as the decisions counted per period) takes its value at the span's
        first reading; the heartbeats after it come at `write`."""
        instants = self._skipped_scrapes(first_s, last_s, ticks)
        if not instants or self.last_s is None:
            return
        self._read(instants[0], instants[-1], False)
        self.instants.extend(instants)
        self.last_s = instants[-1]

    def _skipped_scrapes(self, first_s: float, last_s: float, ticks: int) -> list[float]:
        """The sample instants a ticking run would have read in the skipped span."""
        if ticks <= 0:
            return []
        period_s = (last_s - first_s) / (ticks - 1) if ticks > 1 else 0.0
        instants: list[float] = []
        while self._next_s <= last_s + _EPS_S:
            k = max(0, math.ceil((self._next_s - first_s - _EPS_S) / period_s)) if period_s else 0
            at = first_s + k * period_s
            if not instants or at > instants[-1]:
                instants.append(at)
            while self._next_s <= at + _EPS_S:
                self._next_s += self.interval_s
        return instants

    # -- reading -----------------------------------------------------------------------
    @property
    def scrapes(self) -> int:
        return len(self.instants)

    def scrape(self, now_s: float, keep_all: bool = False, busy: bool = False) -> None:
        """Read every series of the registry at simulated time `now_s`, keeping the points
        that changed (`keep_all`: every point); `busy`: calls are in flight."""
        if self.last_s is not None and now_s <= self.last_s:
            return  # already have this instant; timestamps must increase
        self._read(now_s, now_s, keep_all)
        self.instants.append(now_s)
        if busy:
            self.busy.append(now_s)
        self.last_s = now_s
        if self._held > SPILL_VALUES:
            self._spill_all()

    def _families_now(self) -> list[_Family]:
        """The registry's families (taken again when collectors were added), but those
        `drop_labels` leaves out."""
        collectors = list(self.registry._collector_to_names)
        if len(collectors) != self._collectors:
            known = {id(f.wrapper): f for f in self._families}
            families = []
            for c in collectors:
                if getattr(c, "in_metrics_file", True) is False:
                    continue  # read live, in wall time, not a figure of the run (live mode)
                kind = next((k for cls, k in _KINDS if isinstance(c, cls)), None)
                if kind is None:
                    raise TypeError(f"metrics.om reads counters, gauges and histograms; "
                                    f"{c!r} is none of them")
                if self.drop_labels.intersection(c._labelnames):
                    continue
                families.append(known.get(id(c)) or _Family(c, kind))
            self._families, self._collectors = families, len(collectors)
        return self._families

    def _read(self, at_s: float, seen_s: float, keep_all: bool) -> None:
        """Each series' values at `at_s`; the series were present until `seen_s`."""
        before_s = self.last_s if self.last_s is not None else -math.inf
        observed = self.observations() if self.observations is not None else None
        still = observed is not None and observed == self._observed
        self._observed = observed
        changed = self.changed() if self.changed is not None else None
        buckets = self.observed() if self.observed is not None else None
        for fam in self._families_now():
            if (changed is not None and not keep_all and fam.keys is not None
                    and fam.wrapper not in changed):
                fam.lazy_s = seen_s  # not written since the last reading
                continue
            series = fam.series
            histogram = fam.histogram
            keys, children = fam.children()
            if histogram:  # read again only when a call completed (or a series came)
                flat = None
                unchanged = still and keys == fam.keys
            else:
                flat = list(map(_NUMBER, children))
                unchanged = not keep_all and flat == fam.flat and keys == fam.keys
            if unchanged:
                fam.lazy_s = seen_s  # nothing new: the same series, the same values
                continue
            if not histogram and not keep_all and keys == fam.keys:
                # The same series: only those whose value moved take points; the others
                # are seen until now (`lazy_s`, handed to them by `seen` when the family
                # is next read in full: a series' own `seen_s` is never later).
                was, fam.flat = fam.flat, flat
                lazy_s = fam.lazy_s
                for i in [i for i, (v, w) in enumerate(zip(flat, was, strict=True)) if v != w]:
                    s = series[keys[i]]
                    if lazy_s is not None:
                        s.seen_s = lazy_s
                    if s.seen_s > s.kept_s:
                        self._keep(s, s.values, s.seen_s)  # the last point before the change
                    self._keep(s, (flat[i],), at_s)
                    s.seen_s = seen_s
                fam.lazy_s = seen_s
                continue
            fam.seen()
            fam.keys, fam.flat = keys, flat
            for labels, child in zip(keys, children, strict=True):
                if histogram and still and labels in series:  # unchanged since last read
                    series[labels].seen_s = seen_s
                    continue
                s = series.get(labels)
                if histogram and buckets is not None and s is not None:
                    # The counts so far, one more in each bucket from an observation's up.
                    counts = list(s.values[:-2])
                    for i in buckets.get(child, ()):
                        counts[i:] = map(_PLUS_ONE, counts[i:])
                    values = (*counts, counts[-1], child._sum._value)
                elif histogram:
                    counts = tuple(accumulate(map(_VALUE, child._buckets)))
                    values = (*counts, counts[-1], child._sum._value)
                else:
                    values = (child._value._value,)
                if s is None:
                    s = series[labels] = _Series(
                        0.0 if histogram else self.heartbeat_s,
                        self.rate_heartbeat_s if fam.kind == "counter" else 0.0,
                        fam.prefixes(labels))
                elif s.seen_s < before_s and s.seen_s > s.kept_s:
                    # back after an absence: its last point before it left, and no
                    # heartbeats over the absence
                    self._keep(s, s.values, s.seen_s)
                    s.buffer.append(0.0)
                    s.buffer.append(s.seen_s)
                    s.buffer.extend([0.0] * len(s.prefixes))
                if values != s.values:
                    if s.seen_s > s.kept_s:
                        self._keep(s, s.values, s.seen_s)  # the last point before the change
                    self._keep(s, values, at_s)
                elif keep_all:
                    self._keep(s, values, at_s)
                s.seen_s = seen_s

    def _keep(self, s: _Series, values: tuple, t_s: float) -> None:
        s.values, s.kept_s = values, t_s
        buffer = s.buffer
        buffer.append(1.0)
        buffer.append(t_s)
        buffer.extend(values)
        self._held += len(values) + 1
        self.points += 1

    def finish(self, end_s: float) -> None:
        """Keep every series' state at the run's end, and the last point seen of a series
        that has left the registry. The registry is as the run left it: the listener that
        reads the cluster only at the readings read its last sample at the run's end
        (MetricsListener.on_end)."""
        self.scrape(end_s, keep_all=True)
        for fam in self._families:
            fam.seen()
            for s in fam.series.values():
                if s.seen_s > s.kept_s:
                    self._keep(s, s.values, s.seen_s)

    # -- spilling and writing ----------------------------------------------------------
    def _spill_all(self) -> None:
        """Move the records held in memory to the series' spill files, as they are held
        (`_Series.buffer`)."""
        if self._spill is None:
            if self.spill_parent is not None:
                Path(self.spill_parent).mkdir(parents=True, exist_ok=True)
            self._spill = Path(tempfile.mkdtemp(prefix=".metrics-om-", dir=self.spill_parent))
        for fam in self._families:
            for s in fam.series.values():
                if s.path is None:  # numbered as they come: a series' file is its own
                    s.path = self._spill / f"{self._spill_files}.f64"
                    self._spill_files += 1
                if s.buffer:
                    with s.path.open("ab") as f:
                        s.buffer.tofile(f)
                    del s.buffer[:]
        self._held = 0

    def close(self) -> None:
        """Remove the spill files (after `write`, or when the run is abandoned)."""
        if self._spill is not None:
            shutil.rmtree(self._spill, ignore_errors=True)
            self._spill = None
            for fam in self._families:
                for s in fam.series.values():
                    s.path = None
