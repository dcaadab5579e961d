"""The dashboard against a real Prometheus server: a scraped live run and a backfilled replay.

Starts its own `prometheus` (Debian's package; `.ci/run` installs it) on
loopback with a temporary data directory, and stops it and removes its data
at the end. Skipped, saying why, only where Prometheus is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import ROOT

PROMETHEUS, PROMTOOL = shutil.which("prometheus"), shutil.which("promtool")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None,
                       reason="Prometheus is not installed and could not be: `.ci/run` "
                              "installs Debian's prometheus package (apt-get install prometheus)"),
]
TOKENFACTORY = [sys.executable, "-m", "orchestrator.cli"]
SMALL = ["--max-sessions", "2", "--think-scale", "0.01", "--no-progress"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dashboard_queries() -> list[tuple[str, str]]:
    spec = importlib.util.spec_from_file_location("build_dashboard",
                                                  ROOT / "grafana" / "build_dashboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.queries(module.build())


def concrete(expr: str, rate_interval: str) -> str:
    """What Grafana sends: variables at All (.*), $__rate_interval at a fixed window."""
    for var in ("$run", "$left", "$right"):
        expr = expr.replace(var, ".*")
    return expr.replace("$__rate_interval", rate_interval)


@contextmanager
def prometheus(data: Path, scrape_port: int | None = None):
    """A Prometheus on loopback over `data`; yields its API's base URL."""
    port = free_port()
    config = data.parent / f"prometheus-{port}.yml"
    jobs = ("" if scrape_port is None else
            "scrape_configs:\n  - job_name: tokenfactory\n    scrape_interval: 1s\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{scrape_port}']\n")
    config.write_text("global:\n  scrape_interval: 1s\n" + jobs)
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}",
                             f"--storage.tsdb.path={data}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("prometheus did not start: "
                                     + proc.stderr.read().decode()[-2000:])
            time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def query_range(base: str, expr: str, start: float, end: float, step: float) -> list:
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{base}/api/v1/query_range?{params}", timeout=30) as r:
        body = json.load(r)
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


def query(base: str, expr: str, at: float) -> list:
    params = urllib.parse.urlencode({"query": expr, "time": at})
    with urllib.request.urlopen(f"{base}/api/v1/query?{params}", timeout=30) as r:
        return json.load(r)["data"]["result"]


def has_data(result: list) -> bool:
    return any(v != "NaN" for series in result for _, v in series["values"])


def check_every_panel(base: str, start: float, end: float, step: float, window: str) -> None:
    empty = []
    for title, expr in dashboard_queries():
        if not has_data(query_range(base, concrete(expr, window), start, end, step)):
            empty.append(f"{title}: {expr}")
    assert not empty, "panels without data:\n" + "\n".join(empty)


@pytest.fixture
def scratch():
    path = Path(tempfile.mkdtemp(prefix="tokenfactory-prom-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def wait_for_target(base: str, port: int, timeout_s: float = 30.0) -> None:
    """Prometheus hands new targets to its scrape loop only after its discovery tick
    (about 5 s): start the run once the target is listed, or its first seconds go unseen."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{base}/api/v1/targets", timeout=10) as r:
            active = json.load(r)["data"]["activeTargets"]
        if any(f":{port}/" in t.get("scrapeUrl", "") for t in active):
            return
        time.sleep(0.2)
    raise AssertionError(f"Prometheus did not list the target on port {port} in {timeout_s} s")


def test_every_panel_has_data_when_prometheus_scrapes_a_live_run(scratch):
    metrics_port = free_port()
    with prometheus(scratch / "live-data", scrape_port=metrics_port) as base:
        wait_for_target(base, metrics_port)
        start = time.time()  # wall-clock ok: a live run's samples are stamped by Prometheus
        done = subprocess.run([*TOKENFACTORY, "replay", *SMALL, "--clock", "live", "--speed",
                               "200", "--metrics-port", str(metrics_port), "--json"],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        end = time.time()  # wall-clock ok
        assert end - start > 3, "the live run is too short to be scraped"
        summary = json.loads(done.stdout)
        # The scrape that fails once the run's server has closed marks every series stale,
        # so an instant query at `end` can see nothing: take the last sample before it.
        completed = query(base, "last_over_time(tokenfactory_requests_completed_total[5m])",
                          end)
        assert completed, "Prometheus scraped nothing"
        assert float(completed[0]["value"][1]) <= summary["requests"]["completed"]
        check_every_panel(base, start, end, 1.0, "10s")


def test_every_panel_has_data_over_a_backfilled_compare(scratch):
    out, tsdb = scratch / "cmp", scratch / "tsdb"
    start = float(int(time.time()) - 3600)  # wall-clock ok: the replay's place in time
    done = subprocess.run([*TOKENFACTORY, "compare", *SMALL, "--json", "--out", str(out),
                           "--metrics-start", str(start)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    runs = json.loads(done.stdout)["runs"]
    done = subprocess.run([*TOKENFACTORY, "metrics", "backfill", str(out), "--tsdb", str(tsdb)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    end = start + max(s["sim"]["simulated_s"] for s in runs.values())
    with prometheus(tsdb) as base:
        check_every_panel(base, start, end, 15.0, "1m")
        for name, summary in runs.items():
            at = start + summary["sim"]["simulated_s"]
            got = query(base, f'tokenfactory_requests_completed_total{{controller="{name}"}}',
                        at)
            assert [s["metric"]["run"] for s in got] == [f"{name}-seed0"]
            assert float(got[0]["value"][1]) == summary["requests"]["completed"]
