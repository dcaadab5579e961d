"""The Grafana dashboard is built from code and queries only metrics the emulator exports."""

from __future__ import annotations

import importlib.util
import json

import pytest
from prometheus_client import CollectorRegistry

from orchestrator.run.metrics import Metrics
from orchestrator.run.metrics_listener import MetricsListener
from orchestrator.run.settings import RunSettings, prepare, run_replay
from tests.conftest import ROOT
from traces import sample_path
from traces.replay import LoadOptions


def load_builder():
    spec = importlib.util.spec_from_file_location("build_dashboard",
                                                  ROOT / "grafana" / "build_dashboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def exported() -> set[str]:
    """Every sample and family name a short replay exports."""
    settings = RunSettings(load=LoadOptions(max_sessions=1, think_scale=0.01))
    registry = CollectorRegistry()
    listener = MetricsListener(Metrics(registry), "buffered-seed0", "buffered")
    run_replay(prepare([sample_path()], "auto", settings), settings, listeners=[listener])
    names = set()
    for fam in registry.collect():
        names.add(fam.name)
        names.update(s.name for s in fam.samples)
    return names


def test_every_panel_queries_exported_metrics_only(exported):
    builder = load_builder()
    queries = builder.queries(builder.build())
    assert len(queries) >= 20
    for title, expr in queries:
        names = builder.metric_names(expr)
        assert names, f"panel {title!r} queries no tokenfactory metric: {expr}"
        missing = names - exported
        assert not missing, f"panel {title!r} queries {sorted(missing)}, not exported"


def test_the_committed_dashboard_is_the_built_one():
    builder = load_builder()
    committed = json.loads((ROOT / "grafana" / "dashboards" / "tokenfactory.json").read_text())
    assert committed == builder.build(), "run: python grafana/build_dashboard.py"


def test_the_dashboard_covers_what_operators_watch():
    builder = load_builder()
    dash = builder.build()
    exprs = " ".join(e for _, e in builder.queries(dash))
    for needed in ("tokenfactory_pool_occupancy_ratio", "tokenfactory_admitted_requests_total",
                   "tokenfactory_admission_decisions_total", "histogram_quantile",
                   "tokenfactory_kv_moved_bytes_total", "tokenfactory_worker_hbm_per_gpu_bytes",
                   "tokenfactory_reconfigurations_total", "tokenfactory_pool_gpus"):
        assert needed in exprs
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert "Two controllers side by side" in rows
    assert {v["name"] for v in dash["templating"]["list"]} == {"run", "left", "right"}
