"""A virtual-time run's metrics as OpenMetrics text with timestamps (`metrics.om`).

`OpenMetricsRecorder` is a run listener: every `interval_s` simulated seconds
it scrapes a registry (the one `MetricsListener` feeds; put the recorder after
it in the listeners) and keeps a series' point only when it says something
new: when its value changed since the last scrape (with the point of the
scrape before, when that was not kept, so a step is as sharp as in a full
sampling), or a heartbeat after the series' last kept point: `HEARTBEAT_S`
for gauges and histograms, so Prometheus, whose lookback is five minutes,
sees every series continuously; `RATE_HEARTBEAT_S` for counters, so `rate()`
over a one-minute window finds two points and reads 0 while nothing happens
(a histogram's quantiles have no value then, whatever its cadence).
Spans the run skips as idle (`on_skip`) get their heartbeats and nothing
else. The run's end is kept for every series.

A histogram's points list only the buckets that inform a quantile, the same
at every point: from the highest bound no observation of the run reached to
the lowest bound holding all of them, and +Inf. The buckets below were 0 at
every point and those above equal to +Inf at every point (counts only grow),
so `histogram_quantile` over any window interpolates in the same bucket with
or without them, and a file stays small with fine buckets. Its points are
kept as values and given their lines at `write`, when the run's last point
says which buckets those are.
`drop_labels` leaves out every series carrying one of those labels (`--metrics
run`: no per-pool, per-worker or per-link series).

`write` lays the points on a wall-clock base, `start_unix_s` + simulated
time, so that Prometheus, after `promtool tsdb create-blocks-from
openmetrics`, shows the run as if it had happened then. OpenMetrics wants each
family once, each label set's points together and in time order, and a
histogram's buckets, count and sum together in each point: the recorder keeps
one stream per label set, spilled to a file of its own under `spill_dir` when
the points held in memory pass `SPILL_CHARS`, and joins them at `write`. The
same run and base give the same file, byte for byte.
"""

from __future__ import annotations

import bisect
import math
import shutil
import tempfile
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.utils import floatToGoString

# Under Prometheus' default lookback of 5 minutes (--query.lookback-delta, "Staleness" in
# https://prometheus.io/docs/prometheus/latest/querying/basics/), so an unchanged series
# never drops out of an instant query between two of its points.
HEARTBEAT_S = 240.0
# Half of the shortest window the dashboard's rate() and increase() get: Grafana's
# $__rate_interval is at least four scrape intervals of its default 15 s
# (https://grafana.com/docs/grafana/latest/datasources/prometheus/template-variables/).
RATE_HEARTBEAT_S = 30.0
_RATE_TYPES = frozenset({"counter"})
# Text held in memory across all series before it goes to the spill files.
SPILL_CHARS = 4_000_000
_EPS_S = 1e-9  # sample instants are sums of float periods


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


class _Series:
    """One label set of a family: its last point seen, and the points kept so far (in
    memory as (time_s, payload), or spilled to `path` as "time_s n" then the n payload
    lines). A payload is the point's lines; a histogram's is its values, one per sample,
    rendered at `write` with the buckets its last point says inform a quantile."""

    __slots__ = ("buffer", "heartbeat_s", "histogram", "path", "point", "prefixes", "seen_s",
                 "written_s")

    def __init__(self, heartbeat_s: float, histogram: bool) -> None:
        self.heartbeat_s = heartbeat_s
        self.histogram = histogram
        # ("name{labels} ", value) of each sample of the last point seen
        self.point: tuple[tuple[str, float], ...] = ()
        self.prefixes: tuple[str, ...] = ()  # a histogram's, the same at every point
        self.seen_s = self.written_s = -math.inf
        self.buffer: list[tuple[float, tuple[str, ...]]] = []
        self.path: Path | None = None

    def payload(self, point: tuple[tuple[str, float], ...]) -> tuple[str, ...]:
        if not self.histogram:
            return tuple(prefix + floatToGoString(value) for prefix, value in point)
        if not self.prefixes:
            self.prefixes = tuple(prefix for prefix, _ in point)
        return tuple(map(repr, (value for _, value in point)))

    def render(self, payload, keep: list[int] | None) -> list[str]:
        """A kept point's lines (a histogram's samples at positions `keep`: `informing`)."""
        if keep is None:
            return list(payload)
        return [self.prefixes[i] + floatToGoString(float(payload[i])) for i in keep]

    def informing(self) -> list[int]:
        """A histogram's samples to write, by position: every sample but the buckets
        below the highest bound its last point has no observation in, and those above
        the lowest bound holding all of them (+Inf kept). A bucket left out was 0 at every
        point, or equal to +Inf at every point, since counts only grow."""
        buckets = [i for i, prefix in enumerate(self.prefixes) if "_bucket{" in prefix]
        if not buckets:
            return list(range(len(self.prefixes)))
        counts = [self.point[i][1] for i in buckets]
        total = counts[-1]
        zeros = sum(1 for c in counts if c == 0) if total > 0 else len(counts)
        full = next(k for k, c in enumerate(counts) if c >= total)
        dropped = set(buckets[:max(zeros - 1, 0)]) | set(buckets[full + 1:-1])
        return [i for i in range(len(self.prefixes)) if i not in dropped]


class OpenMetricsRecorder:
    def __init__(self, registry: CollectorRegistry, interval_s: float,
                 spill_dir: Path | None = None, heartbeat_s: float = HEARTBEAT_S,
                 rate_heartbeat_s: float = RATE_HEARTBEAT_S,
                 drop_labels: frozenset[str] = frozenset()) -> None:
        if not interval_s > 0:
            raise ValueError(f"metrics interval must be > 0 s, got {interval_s!r}")
        if not 0 < rate_heartbeat_s <= heartbeat_s:
            raise ValueError(f"metrics heartbeats must be 0 < {rate_heartbeat_s!r} (counters) "
                             f"<= {heartbeat_s!r} (gauges, histograms) s")
        self.registry, self.interval_s = registry, interval_s
        self.drop_labels = frozenset(drop_labels)
        self.heartbeat_s, self.rate_heartbeat_s = heartbeat_s, rate_heartbeat_s
        self.spill_parent = spill_dir  # None: the system's temporary directory
        self._spill: Path | None = None
        # family name -> (type, help, {label set without "le" -> series})
        self._families: dict[str, tuple[str, str, dict[tuple, _Series]]] = {}
        self._next_s = 0.0
        self.last_s: float | None = None
        self.scrapes = 0
        self.points = 0  # points kept
        self._held_chars = 0
        # sample -> (series key, "name{..} "), or None for a sample `drop_labels` leaves out
        self._prefix: dict[tuple, tuple[tuple, str] | None] = {}

    # -- listening ---------------------------------------------------------------------
    def on_sample(self, orch, obs, now_s: float) -> None:
        if now_s + _EPS_S >= self._next_s:
            self.scrape(now_s)
            while self._next_s <= now_s + _EPS_S:
                self._next_s += self.interval_s

    def on_skip(self, orch, first_s: float, last_s: float, ticks: int) -> None:
        """The run skipped `ticks` samples from `first_s` to `last_s` (a fast period apart),
        the observation unchanged: keep the points a ticking run would have kept at its
        scrapes in the span. The registry now holds the span's values: a series that moved
        since the last scrape (at a sample between two scrapes, or a counter the skip
        advanced, as the decisions counted per period) takes its value at the span's
        first scrape, and heartbeats follow."""
        instants = self._skipped_scrapes(first_s, last_s, ticks)
        if not instants or self.last_s is None:
            return
        for fam, key, point in self._read():
            s = self._series(fam.name, fam.type, fam.documentation, key)
            self._observe(s, point, instants[0], False)
            due = s.written_s + s.heartbeat_s
            while (i := bisect.bisect_left(instants, due - _EPS_S)) < len(instants):
                self._keep(s, s.point, instants[i])
                due = instants[i] + s.heartbeat_s
            s.seen_s = instants[-1]
        self.last_s = instants[-1]
        self.scrapes += len(instants)

    def _skipped_scrapes(self, first_s: float, last_s: float, ticks: int) -> list[float]:
        """The sample instants a ticking run would have scraped in the skipped span."""
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

    # -- scraping ----------------------------------------------------------------------
    def scrape(self, now_s: float, keep_all: bool = False) -> None:
        """Read every sample of the registry at simulated time `now_s`, keeping the points
        that changed or are due a heartbeat (`keep_all`: every point)."""
        if self.last_s is not None and now_s <= self.last_s:
            return  # already have this instant; timestamps must increase
        self.last_s = now_s
        self.scrapes += 1
        for fam, key, point in self._read():
            self._observe(self._series(fam.name, fam.type, fam.documentation, key), point,
                          now_s, keep_all)
        if self._held_chars > SPILL_CHARS:
            self._spill_all()

    def _read(self):
        """(family, label set without "le", the point's ("name{labels} ", value) pairs)
        of every series now, but those `drop_labels` leaves out."""
        for fam in self.registry.collect():
            points: dict[tuple, list[tuple[str, float]]] = {}
            for sample in fam.samples:
                if sample.name.endswith("_created"):
                    continue  # creation times are of the emulator's process, not the run
                ident = (sample.name, *sample.labels.items())
                try:
                    cached = self._prefix[ident]
                except KeyError:
                    labels = sample.labels
                    key = tuple((k, v) for k, v in labels.items() if k != "le")
                    cached = self._prefix[ident] = (
                        None if self.drop_labels.intersection(labels)
                        else (key, f"{sample.name}{_labels(labels)} "))
                if cached is not None:
                    points.setdefault(cached[0], []).append((cached[1], sample.value))
            for key, pairs in points.items():
                yield fam, key, tuple(pairs)

    def _series(self, name: str, kind: str, help_text: str, key: tuple) -> _Series:
        entry = self._families.get(name)
        if entry is None:
            entry = self._families[name] = (kind, help_text, {})
        s = entry[2].get(key)
        if s is None:
            s = entry[2][key] = _Series(self.rate_heartbeat_s if kind in _RATE_TYPES
                                        else self.heartbeat_s, kind == "histogram")
        return s

    def _observe(self, s: _Series, point: tuple, now_s: float, keep_all: bool) -> None:
        if point != s.point:
            if s.seen_s > s.written_s:
                self._keep(s, s.point, s.seen_s)  # the last point before the change
            self._keep(s, point, now_s)
        elif keep_all or now_s - s.written_s >= s.heartbeat_s - _EPS_S:
            self._keep(s, point, now_s)
        s.seen_s = now_s

    def _keep(self, s: _Series, point: tuple, t_s: float) -> None:
        payload = s.payload(point)
        s.point, s.written_s = point, t_s
        s.buffer.append((t_s, payload))
        self._held_chars += sum(map(len, payload)) + 24
        self.points += 1

    def finish(self, end_s: float) -> None:
        """Keep every series' state at the run's end, and the last point seen of a series
        that has left the registry."""
        self.scrape(end_s, keep_all=True)
        for _, _, series in self._families.values():
            for s in series.values():
                if s.seen_s > s.written_s:
                    self._keep(s, s.point, s.seen_s)

    # -- spilling and writing ----------------------------------------------------------
    def _spill_all(self) -> None:
        if self._spill is None:
            if self.spill_parent is not None:
                Path(self.spill_parent).mkdir(parents=True, exist_ok=True)
            self._spill = Path(tempfile.mkdtemp(prefix=".metrics-om-", dir=self.spill_parent))
        n = 0
        for _, _, series in self._families.values():
            for s in series.values():
                if s.path is None:
                    s.path = self._spill / f"{n}.txt"
                n += 1
                if s.buffer:
                    # Lines end in "\n" only: escaped label values hold no newline.
                    with s.path.open("a", newline="\n") as f:
                        for t_s, point in s.buffer:
                            f.write(f"{t_s!r} {len(point)}\n")
                            f.writelines(f"{line}\n" for line in point)
                    s.buffer.clear()
        self._held_chars = 0

    @staticmethod
    def _records(s: _Series):
        """(time_s, lines) of every point kept, in order: the spilled ones, then memory's."""
        if s.path is not None and s.path.exists():
            with s.path.open(newline="\n") as f:
                for head in f:
                    t, n = head.split()
                    yield float(t), [next(f)[:-1] for _ in range(int(n))]
        yield from s.buffer

    def lines(self, start_unix_s: float):
        for name, (kind, help_text, series) in self._families.items():
            if not any(s.written_s > -math.inf for s in series.values()):
                continue
            yield f"# HELP {name} {_escape_help(help_text)}\n"
            yield f"# TYPE {name} {kind}\n"
            for s in series.values():
                keep = s.informing() if s.histogram else None
                for t_s, payload in self._records(s):
                    stamp = f" {start_unix_s + t_s:.3f}\n"
                    for line in s.render(payload, keep):
                        yield line + stamp
        yield "# EOF\n"

    def write(self, path: Path, start_unix_s: float) -> None:
        with Path(path).open("w") as f:
            f.writelines(self.lines(start_unix_s))

    def close(self) -> None:
        """Remove the spill files (after `write`, or when the run is abandoned)."""
        if self._spill is not None:
            shutil.rmtree(self._spill, ignore_errors=True)
            self._spill = None
            for _, _, series in self._families.values():
                for s in series.values():
                    s.path = None


def time_range(path: Path) -> tuple[float, float] | None:
    """First and last timestamp of a metrics.om file, or None when it has no samples.
    Raises ValueError naming the file and line of a sample line without a timestamp."""
    lo = hi = None
    with Path(path).open() as f:
        for lineno, line in enumerate(f, 1):
            if line.startswith("#"):
                continue
            try:
                t = float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                raise ValueError(f"{path}:{lineno}: expected a sample ending in a timestamp, "
                                 f"got {line.strip()[:80]!r}") from None
            lo = t if lo is None or t < lo else lo
            hi = t if hi is None or t > hi else hi
    return None if lo is None else (lo, hi)
