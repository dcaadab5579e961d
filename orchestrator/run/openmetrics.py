"""A virtual-time run's metrics as OpenMetrics text with timestamps (`metrics.om`).

`OpenMetricsRecorder` is a run listener: every `interval_s` simulated seconds
it scrapes a registry (the one `MetricsListener` feeds; put the recorder after
it in the listeners) and keeps the samples with their simulated time. `write`
lays them on a wall-clock base, `start_unix_s` + simulated time, so that
Prometheus, after `promtool tsdb create-blocks-from openmetrics`, shows the
run as if it had happened then. OpenMetrics wants each family once, each
label set's points together and in time order, and a histogram's buckets,
count and sum together in each point: the recorder groups them so.
The same run and base give the same file, byte for byte.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.utils import floatToGoString


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


class OpenMetricsRecorder:
    def __init__(self, registry: CollectorRegistry, interval_s: float) -> None:
        if not interval_s > 0:
            raise ValueError(f"metrics interval must be > 0 s, got {interval_s!r}")
        self.registry, self.interval_s = registry, interval_s
        # family name -> (type, help, {label set -> [(time_s, "name{labels} value"), ...]})
        self._families: dict[str, tuple[str, str, dict[tuple, list[tuple[float, str]]]]] = {}
        self._next_s = 0.0
        self.last_s: float | None = None
        self.scrapes = 0
        self._prefix: dict[tuple, tuple[tuple, str]] = {}  # sample -> (series key, "name{..}")

    def on_sample(self, orch, obs, now_s: float) -> None:
        # 1 ns tolerance: sample instants are sums of float periods.
        if now_s + 1e-9 >= self._next_s:
            self.scrape(now_s)
            while self._next_s <= now_s + 1e-9:
                self._next_s += self.interval_s

    def scrape(self, now_s: float) -> None:
        """Record every sample of the registry at simulated time `now_s`."""
        if self.last_s is not None and now_s <= self.last_s:
            return  # already have this instant; timestamps must increase
        self.last_s = now_s
        self.scrapes += 1
        for fam in self.registry.collect():
            entry = self._families.setdefault(fam.name, (fam.type, fam.documentation, {}))
            series = entry[2]
            for s in fam.samples:
                if s.name.endswith("_created"):
                    continue  # creation times are of the emulator's process, not the run
                ident = (s.name, *s.labels.items())
                cached = self._prefix.get(ident)
                if cached is None:
                    key = tuple((k, v) for k, v in s.labels.items() if k != "le")
                    cached = self._prefix[ident] = (key, f"{s.name}{_labels(s.labels)} ")
                series.setdefault(cached[0], []).append(
                    (now_s, cached[1] + floatToGoString(s.value)))

    def finish(self, end_s: float) -> None:
        """Take the final state (the run's end) if the last scrape was before it."""
        self.scrape(end_s)

    def lines(self, start_unix_s: float):
        for name, (kind, help_text, series) in self._families.items():
            if not series:
                continue
            yield f"# HELP {name} {_escape_help(help_text)}\n"
            yield f"# TYPE {name} {kind}\n"
            for points in series.values():
                for t_s, text in points:
                    yield f"{text} {start_unix_s + t_s:.3f}\n"
        yield "# EOF\n"

    def write(self, path: Path, start_unix_s: float) -> None:
        with Path(path).open("w") as f:
            f.writelines(self.lines(start_unix_s))


def time_range(path: Path) -> tuple[float, float] | None:
    """First and last timestamp of a metrics.om file, or None when it has no samples."""
    lo = hi = None
    with Path(path).open() as f:
        for line in f:
            if line.startswith("#"):
                continue
            t = float(line.rsplit(" ", 1)[1])
            lo = t if lo is None or t < lo else lo
            hi = t if hi is None or t > hi else hi
    return None if lo is None else (lo, hi)
