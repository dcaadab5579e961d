"""Live mode's metrics: worker processes' heartbeat figures and failure counters on the
run's registry, read at scrape time."""

from types import SimpleNamespace

from prometheus_client import CollectorRegistry

from orchestrator.live.metrics import LiveCollector, register_live_metrics
from orchestrator.run.metrics import Metrics
from orchestrator.run.metrics_listener import MetricsListener


def fake_backend():
    handles = [SimpleNamespace(index=0, alive=True, writer=object(), rss_bytes=40 << 20,
                               steps_done=12),
               SimpleNamespace(index=1, alive=False, writer=None, rss_bytes=0, steps_done=3)]
    return SimpleNamespace(handles=handles, lost_total=2, restarts_total=1, bad_peers_total=3)


def test_the_collector_exports_heartbeat_figures_and_failure_counters():
    registry = CollectorRegistry()
    backend = fake_backend()
    registry.register(LiveCollector(backend))
    get = registry.get_sample_value
    assert get("tokenfactory_live_worker_processes") == 1
    assert get("tokenfactory_live_worker_processes_lost_total") == 2
    assert get("tokenfactory_live_worker_processes_restarted_total") == 1
    assert get("tokenfactory_live_bad_connections_total") == 3
    assert get("tokenfactory_live_worker_resident_bytes", {"process": "0"}) == 40 << 20
    assert get("tokenfactory_live_worker_steps_total", {"process": "1"}) == 3
    backend.lost_total = 5  # read at scrape time
    assert get("tokenfactory_live_worker_processes_lost_total") == 5


def test_registered_on_the_run_listener_registry():
    registry = CollectorRegistry()
    listener = MetricsListener(Metrics(registry), "run", "buffered")
    register_live_metrics(fake_backend(), [object(), listener])
    assert registry.get_sample_value("tokenfactory_live_bad_connections_total") == 3
