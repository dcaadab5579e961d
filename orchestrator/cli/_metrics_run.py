"""Metrics for the replaying commands: options, the /metrics server, metrics.om files.

One `MetricsHub` per command invocation (kept on the parsed arguments): each
run gets its own registry and listener, and the HTTP server, bound before the
first run starts and up until the command ends, serves all the command's runs
merged, so during `compare`'s second run the first one's final values are
still there. When the command's runs are over it stays up until one scrape
has read their final values, for at most `--metrics-linger` wall seconds
(`MetricsHub.finish`), so a Prometheus scraping every few seconds does not
miss the end of a run.
"""

from __future__ import annotations

import argparse
import errno
import math
import sys
import threading
import time
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from orchestrator.cli._common import UserError, positive_float
from orchestrator.run.metrics import Compat, Metrics
from orchestrator.run.metrics_listener import MetricsListener
from orchestrator.run.openmetrics import OpenMetricsRecorder

DEFAULT_INTERVAL_S = 5.0
# Wall seconds /metrics waits after the runs for a scrape of their final values: two
# scrape intervals of grafana/prometheus.yml (5 s).
DEFAULT_LINGER_S = 10.0
OM_NAME = "metrics.om.gz"


class MetricsLevel(Enum):
    """What --out's metrics.om holds (`--metrics`)."""

    FULL = "full"  # every series
    RUN = "run"  # the run's own: no series labelled by pool, worker or link
    NONE = "none"  # no metrics.om


# Series `--metrics run` leaves out: those carrying one of these labels.
PER_PART_LABELS = frozenset({"pool", "worker", "link"})


def port_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port 1-65535, got {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port 1-65535, got {text!r}")
    return value


def start_time(text: str) -> float:
    """Unix seconds, or an ISO 8601 instant (UTC when it names no zone); Unix seconds
    must name an instant a date can (finite, years 1-9999), as metrics.om stamps them."""
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        try:
            datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, ValueError, OSError):
            raise argparse.ArgumentTypeError(
                f"expected Unix seconds of a date in years 1-9999, got {text!r}") from None
        return seconds
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected Unix seconds or an ISO 8601 time, got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def non_negative_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


def run_name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a name, got an empty one")
    return text


def add_metrics_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("metrics")
    g.add_argument("--metrics", choices=[m.value for m in MetricsLevel],
                   default=MetricsLevel.FULL.value,
                   help="what --out's metrics.om holds: full (every series), run (the run's "
                        "own: no per-pool, per-worker or per-link series), none (no "
                        "metrics.om) (default %(default)s)")
    g.add_argument("--run-name", metavar="NAME", type=run_name,
                   help="the runs' `run` label in metrics, summary and trace events "
                        "(default <controller>-seed<seed>; compare, demo: NAME-<label>)")
    g.add_argument("--metrics-port", type=port_number, metavar="P",
                   help="serve Prometheus metrics on /metrics at this port during the run, "
                        "and after it until one scrape has read the final values "
                        "(--metrics-linger)")
    g.add_argument("--metrics-linger", type=non_negative_seconds, default=DEFAULT_LINGER_S,
                   metavar="S", help="--metrics-port: after the runs, wait at most S wall "
                                     "seconds for that scrape (default %(default)s; 0: none)")
    g.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                   help="address to bind /metrics to (default 127.0.0.1)")
    g.add_argument("--metrics-interval", type=positive_float, default=DEFAULT_INTERVAL_S,
                   metavar="S", help="metrics.om: simulated seconds between readings; a series "
                                     "is written when it changes and on a heartbeat "
                                     "(docs/metrics.md) (default %(default)s)")
    g.add_argument("--metrics-start", type=start_time, metavar="T",
                   help="metrics.om: wall-clock time of the run's start, Unix seconds or ISO "
                        "8601 (default: the run ends when the command started)")
    g.add_argument("--metrics-compat", choices=[c.value for c in Compat], default="none",
                   help="also expose each worker's metrics under vLLM's names (vllm)")


class _Merged:
    """A collector serving several runs' registries as one set of families."""

    def __init__(self, hub: MetricsHub) -> None:
        self.hub = hub

    def collect(self):
        merged: dict[str, Metric] = {}
        for registry in list(self.hub.registries):
            for fam in registry.collect():
                out = merged.get(fam.name)
                if out is None:
                    out = merged[fam.name] = Metric(fam.name, fam.documentation, fam.type)
                out.samples.extend(fam.samples)
        return list(merged.values())


class MetricsHub:
    def __init__(self, args: argparse.Namespace) -> None:
        self.port = getattr(args, "metrics_port", None)
        self.host = getattr(args, "metrics_host", "127.0.0.1")
        self.interval_s = getattr(args, "metrics_interval", DEFAULT_INTERVAL_S)
        self.start_s = getattr(args, "metrics_start", None)
        self.compat = Compat(getattr(args, "metrics_compat", "none"))
        self.level = MetricsLevel(getattr(args, "metrics", MetricsLevel.FULL.value))
        self.linger_s = getattr(args, "metrics_linger", DEFAULT_LINGER_S)
        self.command_start_s = math.floor(time.time())  # wall-clock ok: metrics.om's base
        self.registries: list[CollectorRegistry] = []
        self._server = None
        self._thread = None
        self._served = threading.Condition()
        self.scrapes_served = 0  # /metrics responses sent in full
        # Scrapes are told apart by the epoch they began in: `finish` starts a new one,
        # and waits for a scrape of it (begun after the runs ended: their final values).
        self._epoch = 0
        self._served_epoch = -1

    def serve(self) -> None:
        """Bind /metrics now, before any run, so a taken port fails at once."""
        if self.port is None or self._server is not None:
            return
        from orchestrator.cli._metrics_server import start_server

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Merged(self))
        try:
            self._server, self._thread = start_server(self.host, self.port, registry,
                                                      self._on_begin, self._on_served)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UserError(f"--metrics-port {self.port}: address already in use") from None
            raise UserError(f"--metrics-host {self.host} --metrics-port {self.port}: "
                            f"{exc.strerror or exc}") from None

    def _on_begin(self) -> int:
        with self._served:
            return self._epoch

    def _on_served(self, epoch: int) -> None:
        with self._served:
            self.scrapes_served += 1
            self._served_epoch = max(self._served_epoch, epoch)
            self._served.notify_all()

    @contextmanager
    def serving(self):
        """Serve /metrics for one run (every run so far, merged); a taken port fails before
        the run starts. The server stays up for the command's next runs: `finish` ends it."""
        self.serve()
        yield self

    def finish(self, wall_clock=time.monotonic) -> bool:
        """After the command's runs: wait, at most `linger_s` wall seconds, until /metrics
        has served one scrape begun after now (so read after the runs ended: their final
        values), then close it. True when that scrape was served; False when none came
        (or no server)."""
        if self._server is None:
            return False
        with self._served:
            self._epoch += 1
            epoch = self._epoch
        url = f"http://{self.host}:{self.port}/metrics"
        if self.linger_s > 0:
            sys.stderr.write(f"note: serving the final metrics on {url} until scraped once, "
                             f"at most {self.linger_s:g} s (--metrics-linger)\n")
        deadline = wall_clock() + self.linger_s  # wall-clock ok: a bound on the wait
        with self._served:
            while self._served_epoch < epoch:
                left = deadline - wall_clock()  # wall-clock ok
                if left <= 0:
                    break
                self._served.wait(min(left, 0.5))  # short waits: Ctrl-C is seen at once
            served = self._served_epoch >= epoch
        self.close()
        return served

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def listeners(self, run: str, controller: str, recording: bool,
                  spill_dir: Path | None = None):
        """A listener feeding a fresh registry, and with `recording` a metrics.om recorder
        after it (spilling its points under `spill_dir` as the run goes); nothing when
        nobody would read the metrics."""
        recording = recording and self.level is not MetricsLevel.NONE
        if self.port is None and not recording:
            return [], None
        registry = CollectorRegistry()
        self.registries.append(registry)
        drop = PER_PART_LABELS if self.level is MetricsLevel.RUN else frozenset()
        recorder = (OpenMetricsRecorder(registry, self.interval_s, spill_dir, drop_labels=drop)
                    if recording else None)
        # Without /metrics nothing reads the registry between the recorder's readings.
        listener = MetricsListener(Metrics(registry, self.compat), run, controller,
                                   readings=recorder if self.port is None else None)
        if recorder is None:
            return [listener], None
        recorder.observations = lambda: listener.observations
        if self.port is None:  # the listener is the registry's one writer
            recorder.changed = listener.changed
            recorder.observed = listener.take_observed
        return [listener, recorder], recorder

    def write(self, recorder: OpenMetricsRecorder | None, path: Path,
              simulated_s: float) -> None:
        """Write a run's metrics.om (nothing when no recorder: `--metrics none`)."""
        if recorder is None:
            return
        recorder.finish(simulated_s)
        start = (self.start_s if self.start_s is not None
                 else self.command_start_s - math.ceil(simulated_s))
        try:
            recorder.write(path, start)
        finally:
            recorder.close()


def metrics_hub(args: argparse.Namespace) -> MetricsHub:
    """The command's hub, made on first use and kept on its parsed arguments."""
    hub = getattr(args, "_metrics_hub", None)
    if hub is None:
        hub = MetricsHub(args)
        args._metrics_hub = hub
    return hub
