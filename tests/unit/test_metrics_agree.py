"""Metrics that agree with the summary (issue 35, item 5): Prometheus' quantiles of the
latency histograms within 10% of the summary's, runs told apart by --run-name, and the
/metrics endpoint serving the final values once before the command exits."""

from __future__ import annotations

import argparse
import itertools
import math
import socket
import threading
import urllib.request

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter

from orchestrator.cli._metrics_run import MetricsHub
from orchestrator.control.config import ControlConfig
from orchestrator.run.metrics import ITL_BUCKETS_S, TTFT_BUCKETS_S, Metrics
from orchestrator.run.metrics_listener import MetricsListener
from orchestrator.run.openmetrics import OpenMetricsRecorder, open_text
from orchestrator.run.settings import RunSettings, prepare, run_replay
from tests.conftest import run_cli
from traces import sample_path
from traces.replay import LoadOptions


def _text(path) -> str:
    with open_text(path) as f:
        return f.read()

QUANTILES = (0.5, 0.9, 0.99)


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' histogram_quantile (promql/quantile.go, bucketQuantile) over cumulative
    (upper bound, count) pairs, +Inf last: the bucket holding rank q x count, linear
    interpolation inside it from the bucket below's bound (0 below the first, when the
    first bound is positive); in the +Inf bucket, the highest finite bound."""
    buckets = sorted(buckets)
    total = buckets[-1][1]
    if total == 0:
        return math.nan
    rank = q * total
    i = next(k for k, (_, count) in enumerate(buckets) if count >= rank)
    if i == len(buckets) - 1:
        return buckets[-2][0]
    upper, count = buckets[i]
    lower, below = (0.0, 0.0) if i == 0 else buckets[i - 1]
    if i == 0 and upper <= 0:
        return upper
    return lower + (upper - lower) * (rank - below) / (count - below)


def final_buckets(text: str, name: str, run: str) -> list[tuple[float, float]]:
    """The last point's buckets of one histogram in a metrics.om text."""
    last: dict[float, tuple[float, float]] = {}
    for line in text.splitlines():
        if line.startswith(f"{name}_bucket{{") and f'run="{run}"' in line:
            labels, value, stamp = line.rsplit(" ", 2)
            le = labels.split('le="')[1].split('"')[0]
            bound = math.inf if le == "+Inf" else float(le)
            if bound not in last or float(stamp) >= last[bound][0]:
                last[bound] = (float(stamp), float(value))
    return [(bound, value) for bound, (_, value) in last.items()]


def registry_buckets(registry, name: str, run: str) -> list[tuple[float, float]]:
    for fam in registry.collect():
        if fam.name == name:
            return [(float(s.labels["le"]), s.value) for s in fam.samples
                    if s.name.endswith("_bucket") and s.labels["run"] == run]
    raise KeyError(name)


def loaded_run(tmp_path):
    """A run whose TTFT spreads over many buckets: the demo's cluster, 32 decode slots,
    sessions started fast enough that calls queue."""
    settings = RunSettings(cluster="gb200-nvl72x1-decode32", seed=1,
                           load=LoadOptions(sessions_per_hour=1500, think_scale=0.02,
                                            duration_s=150.0, repeat=2),
                           control=ControlConfig(observation_lag_s=5.0))
    prepared = prepare([sample_path()], "auto", settings)
    registry = CollectorRegistry()
    listener = MetricsListener(Metrics(registry), "q-run", settings.controller)
    recorder = OpenMetricsRecorder(registry, 5.0)
    result, summary = run_replay(prepared, settings, listeners=[listener, recorder])
    recorder.finish(result.simulated_s)
    path = tmp_path / "metrics.om"
    recorder.write(path, 1_700_000_000.0)
    return registry, path.read_text(), summary


def test_prometheus_quantiles_of_a_run_are_within_10_percent_of_the_summary(tmp_path):
    registry, text, summary = loaded_run(tmp_path)
    assert summary["ttft_s"]["p99"] / summary["ttft_s"]["p50"] > 2  # ten buckets and more
    for name, key in (("tokenfactory_request_ttft_seconds", "ttft_s"),
                      ("tokenfactory_request_itl_seconds", "itl_s")):
        written = final_buckets(text, name, "q-run")
        full = registry_buckets(registry, name, "q-run")
        # metrics.om lists only the buckets that inform a quantile, and gives the same ones
        assert len(written) < len(full)
        for q in QUANTILES:
            got = histogram_quantile(q, written)
            assert got == histogram_quantile(q, full)
            want = summary[key][f"p{round(q * 100)}"]
            assert abs(got - want) <= 0.10 * want, (name, q, got, want)


@given(st.lists(st.floats(min_value=0.0101, max_value=9999.0), min_size=1, max_size=300),
       st.sampled_from(QUANTILES))
def test_ttft_buckets_bound_the_interpolation_error_by_10_percent(values, q):
    """Whatever the values (inside the buckets' range), the quantile Prometheus
    interpolates is within 10% of the value at its rank (the ceil(q x n)-th smallest)."""
    assert max(b / a for a, b in itertools.pairwise(TTFT_BUCKETS_S)) <= 1.1 + 1e-12
    assert max(b / a for a, b in itertools.pairwise(ITL_BUCKETS_S)) <= 1.1 + 1e-12
    arr = np.sort(np.asarray(values))
    buckets = [(b, float(np.sum(arr <= b))) for b in TTFT_BUCKETS_S] + [(math.inf, len(arr))]
    at_rank = arr[max(0, math.ceil(q * len(arr)) - 1)]
    assert abs(histogram_quantile(q, buckets) - at_rank) <= 0.1 * at_rank * (1 + 1e-9)


def test_run_name_labels_metrics_summary_and_each_compared_run(tmp_path, capsys):
    small = ["--max-sessions", "1", "--think-scale", "0.01", "--no-progress", "--json"]
    code, out, _ = run_cli(["replay", *small, "--run-name", "live-a", "--out",
                            str(tmp_path / "a")], capsys)
    assert code == 0 and '"run": "live-a"' in out
    text = _text(tmp_path / "a" / "metrics.om.gz")
    assert 'run="live-a"' in text and "buffered-seed0" not in text
    code, out, _ = run_cli(["compare", *small, "--run-name", "b", "--out",
                            str(tmp_path / "c")], capsys)
    assert code == 0
    assert 'run="b-retire"' in _text(tmp_path / "c" / "retire-metrics.om.gz")
    assert 'run="b-buffered"' in _text(tmp_path / "c" / "buffered-metrics.om.gz")
    code, _, err = run_cli(["replay", *small, "--run-name", " "], capsys)
    assert code == 2 and "--run-name" in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _hub(port: int, linger_s: float) -> MetricsHub:
    return MetricsHub(argparse.Namespace(metrics_port=port, metrics_host="127.0.0.1",
                                         metrics_linger=linger_s))


def test_finish_returns_once_a_scrape_begun_after_it_was_served():
    port = _free_port()
    hub = _hub(port, linger_s=120.0)
    registry = CollectorRegistry()
    hub.registries.append(registry)
    Counter("t_done_requests", "done", registry=registry).inc(504)
    hub.serve()
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(hub.finish()))
    waiter.start()
    texts = []
    while waiter.is_alive():  # a scraper that polls, as Prometheus does
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                texts.append(r.read().decode())
        except OSError:
            pass
        waiter.join(0.02)
    assert result == [True]
    assert texts and "t_done_requests_total 504.0" in texts[-1]
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # its scrapes' TIME_WAIT
        s.bind(("127.0.0.1", port))  # no listener left: closed once that scrape was served


def test_without_a_scraper_finish_gives_up_after_the_linger():
    hub = _hub(_free_port(), linger_s=0.2)
    hub.serve()
    clock = iter([0.0, 0.1, 0.25, 0.3])
    assert hub.finish(wall_clock=lambda: next(clock)) is False
