"""Metrics for the replaying commands: options, the /metrics server, metrics.om files.

One `MetricsHub` per command invocation (kept on the parsed arguments): each
run gets its own registry and listener, and the HTTP server, bound before
each run starts, serves all the command's runs merged, so during `compare`'s
second run the first one's final values are still there.
"""

from __future__ import annotations

import argparse
import errno
import math
import time
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from orchestrator.cli._common import UserError, positive_float
from orchestrator.run.metrics import Compat, Metrics
from orchestrator.run.metrics_listener import MetricsListener
from orchestrator.run.openmetrics import OpenMetricsRecorder

DEFAULT_INTERVAL_S = 5.0
OM_NAME = "metrics.om"


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


def add_metrics_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("metrics")
    g.add_argument("--metrics-port", type=port_number, metavar="P",
                   help="serve Prometheus metrics on /metrics at this port during the run")
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
        self.command_start_s = math.floor(time.time())  # wall-clock ok: metrics.om's base
        self.registries: list[CollectorRegistry] = []
        self._server = None
        self._thread = None

    def serve(self) -> None:
        """Bind /metrics now, before any run, so a taken port fails at once."""
        if self.port is None or self._server is not None:
            return
        from prometheus_client import start_http_server

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Merged(self))
        try:
            self._server, self._thread = start_http_server(self.port, self.host, registry)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UserError(f"--metrics-port {self.port}: address already in use") from None
            raise UserError(f"--metrics-host {self.host} --metrics-port {self.port}: "
                            f"{exc.strerror or exc}") from None

    @contextmanager
    def serving(self):
        """Serve /metrics for one run (every run so far, merged); a taken port fails before
        the run starts. The socket is closed after each run and bound again for the next."""
        self.serve()
        try:
            yield self
        finally:
            self.close()

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
        if self.port is None and not recording:
            return [], None
        registry = CollectorRegistry()
        self.registries.append(registry)
        listeners: list[object] = [MetricsListener(Metrics(registry, self.compat), run,
                                                   controller)]
        recorder = (OpenMetricsRecorder(registry, self.interval_s, spill_dir)
                    if recording else None)
        if recorder is not None:
            listeners.append(recorder)
        return listeners, recorder

    def write(self, recorder: OpenMetricsRecorder, path: Path, simulated_s: float) -> None:
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
