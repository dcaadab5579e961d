"""The `OpenMetricsRecorder`'s bookkeeping: per family (`_Family`) and per label set
(`_Series`), what the last reading found, the points kept so far and the text that
starts each of its lines. The recorder (orchestrator.run.openmetrics) reads the
registry into them."""

from __future__ import annotations

import math
from array import array
from pathlib import Path

from prometheus_client.utils import floatToGoString

_ONE_KEY = [()]  # the label values of a family without labels (never changed)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labels(labels: list[tuple[str, str]]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}"


class _Series:
    """One label set of a family: the values of its last reading, and the points kept so
    far (in memory as (time_s, values), or spilled to `path`). A record whose values are
    None marks the last reading before the series left the registry: heartbeats stop
    there."""

    __slots__ = ("buffer", "busy_heartbeat_s", "heartbeat_s", "kept_s", "path", "prefixes",
                 "seen_s", "values")

    def __init__(self, heartbeat_s: float, busy_heartbeat_s: float,
                 prefixes: tuple[str, ...]) -> None:
        self.heartbeat_s = heartbeat_s  # 0: none (a histogram)
        self.busy_heartbeat_s = busy_heartbeat_s  # while calls are in flight (a counter)
        self.prefixes = prefixes  # "name{labels} " of each value: buckets, count, sum
        self.values: tuple[float, ...] | None = None
        self.kept_s = self.seen_s = -math.inf
        # Records not spilled yet, as doubles: per record a flag (1: a point, 0: the
        # series left the registry), its time, its values (0s after a flag of 0).
        self.buffer = array("d")
        self.path: Path | None = None

    def informing(self) -> list[int]:
        """A histogram's values to write, by position: every one but the buckets below
        the highest bound its last point has no observation in, and those above the
        lowest bound holding all of them (+Inf kept). A bucket left out was 0 at every
        point, or equal to +Inf at every point, since counts only grow."""
        n = len(self.prefixes)
        if n < 3 or "_bucket{" not in self.prefixes[0]:
            return list(range(n))
        counts = self.values[:n - 2]  # the buckets; then count and sum
        total = counts[-1]
        zeros = sum(1 for c in counts if c == 0) if total > 0 else len(counts)
        full = next(k for k, c in enumerate(counts) if c >= total)
        dropped = set(range(max(zeros - 1, 0))) | set(range(full + 1, len(counts) - 1))
        return [i for i in range(n) if i not in dropped]


class _Family:
    __slots__ = ("flat", "help", "histogram", "keys", "kind", "labelnames", "lazy_s", "name",
                 "series", "wrapper")

    def __init__(self, wrapper, kind: str) -> None:
        self.wrapper, self.kind = wrapper, kind
        self.name, self.help = wrapper._name, wrapper._documentation
        self.labelnames = tuple(wrapper._labelnames)
        self.histogram = kind == "histogram"
        self.series: dict[tuple[str, ...], _Series] = {}
        # A gauge's or a counter's label sets and values at the last reading: a reading
        # that finds the same ones only notes its instant (`lazy_s`), given to each of
        # those series' `seen_s` when the family is next read in full (`seen`).
        self.keys: list[tuple[str, ...]] | None = None
        self.flat: list[float] | None = None
        self.lazy_s: float | None = None

    def seen(self) -> None:
        """Each series present at the last readings that found the family unchanged has
        been seen until the last of them."""
        if self.lazy_s is not None:
            for labels in self.keys:
                self.series[labels].seen_s = self.lazy_s
            self.lazy_s = None

    def children(self) -> tuple[list, list]:
        """The label values of every series now in the registry, and their children."""
        if self.labelnames:
            metrics = self.wrapper._metrics
            return list(metrics), list(metrics.values())
        return _ONE_KEY, [self.wrapper]

    def prefixes(self, values: tuple[str, ...]) -> tuple[str, ...]:
        labels = list(zip(self.labelnames, values, strict=True))
        if self.kind == "counter":
            return (f"{self.name}_total{_labels(labels)} ",)
        if self.kind == "gauge":
            return (f"{self.name}{_labels(labels)} ",)
        bounds = self.wrapper._upper_bounds
        return (*(f"{self.name}_bucket{_labels([*labels, ('le', floatToGoString(b))])} "
                  for b in bounds),
                f"{self.name}_count{_labels(labels)} ", f"{self.name}_sum{_labels(labels)} ")
