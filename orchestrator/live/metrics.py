"""Live mode's own metrics, on the run's one /metrics endpoint.

Every worker's state (queues, batches, tokens, KV) is already the
orchestrator's: worker processes only execute steps. So the orchestrator's
registry exports everything, and worker processes report what only they know
(steps executed, resident memory) in their heartbeats; a custom collector
turns those into samples at scrape time. prometheus-client's multiprocess mode
would need a shared directory of mmap files and would add nothing the
orchestrator does not hold.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


class LiveCollector:
    # The worker processes' health as /metrics serves it now, in wall time: not part of
    # the run's metrics.om.gz, whose points are in simulated time (OpenMetricsRecorder).
    in_metrics_file = False

    def __init__(self, backend) -> None:
        self.backend = backend

    def collect(self):
        b = self.backend
        up = GaugeMetricFamily("tokenfactory_live_worker_processes",
                               "Worker processes connected and alive")
        up.add_metric([], sum(1 for h in b.handles if h.alive and h.writer is not None))
        yield up
        lost = CounterMetricFamily("tokenfactory_live_worker_processes_lost",
                                   "Worker processes lost (exited, closed or silent)")
        lost.add_metric([], b.lost_total)
        yield lost
        restarted = CounterMetricFamily("tokenfactory_live_worker_processes_restarted",
                                        "Worker processes started again after a loss")
        restarted.add_metric([], b.restarts_total)
        yield restarted
        bad = CounterMetricFamily("tokenfactory_live_bad_connections",
                                  "Connections closed for a bad frame, message or token")
        bad.add_metric([], b.bad_peers_total)
        yield bad
        rss = GaugeMetricFamily("tokenfactory_live_worker_resident_bytes",
                                "Resident memory of each worker process, from its heartbeats",
                                labels=["process"])
        steps = CounterMetricFamily("tokenfactory_live_worker_steps",
                                    "Steps each worker process has executed",
                                    labels=["process"])
        for h in b.handles:
            rss.add_metric([str(h.index)], h.rss_bytes)
            steps.add_metric([str(h.index)], h.steps_done)
        yield rss
        yield steps


def register_live_metrics(backend, listeners: Sequence[object]) -> None:
    """Add the live collector to the registry of the run's metrics listener, if any."""
    for listener in listeners:
        metrics = getattr(listener, "m", None)
        registry = getattr(metrics, "registry", None)
        if registry is not None:
            registry.register(LiveCollector(backend))
            return
