"""Prometheus metrics: families, the run listener, the exposition, metrics.om, CLI errors."""

from __future__ import annotations

import gzip
import json
import shutil
import socket
import subprocess
import weakref

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from orchestrator.cli import main
from orchestrator.control.policies.base import AdmissionReason
from orchestrator.run.metrics import FAMILIES, VLLM_FAMILIES, Compat, Metrics, family_names
from orchestrator.run.metrics_listener import MetricsListener
from orchestrator.run.openmetrics import OpenMetricsRecorder, open_text, time_range
from orchestrator.run.settings import Prepared, RunSettings, prepare, run_replay
from traces import sample_path
from traces.replay import LoadOptions

SMALL = ["--max-sessions", "2", "--think-scale", "0.01", "--no-progress"]
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package "
                                    "prometheus) is not installed")


@pytest.fixture(scope="module")
def prepared() -> Prepared:
    settings = RunSettings(load=LoadOptions(max_sessions=2, think_scale=0.01))
    return prepare([sample_path()], "auto", settings)


def replay(prepared: Prepared, compat: Compat = Compat.NONE, interval_s: float = 5.0):
    settings = RunSettings(load=LoadOptions(max_sessions=2, think_scale=0.01))
    registry = CollectorRegistry()
    listener = MetricsListener(Metrics(registry, compat), "buffered-seed0", "buffered")
    recorder = OpenMetricsRecorder(registry, interval_s)
    result, summary = run_replay(prepared, settings, listeners=[listener, recorder])
    recorder.finish(result.simulated_s)
    return registry, recorder, result, summary


@pytest.fixture(scope="module")
def run(prepared):
    return replay(prepared)


def value(registry, name, **labels):
    labels = {"run": "buffered-seed0", "controller": "buffered", **labels}
    return registry.get_sample_value(name, labels)


def test_names_follow_the_conventions():
    for fam in FAMILIES:
        assert fam.name.startswith("tokenfactory_")
        assert {"run", "controller"} <= set(fam.labels)
        if fam.kind == "counter":
            assert fam.name.endswith("_total")
        if fam.unit in ("seconds", "bytes", "joules", "ratio"):
            assert fam.unit in fam.name
    assert len(set(family_names(Compat.VLLM))) == len(FAMILIES) + len(VLLM_FAMILIES)


def test_a_fresh_registry_holds_every_family():
    registry = CollectorRegistry()
    Metrics(registry)
    names = {m.name for m in registry.collect()}
    assert len(names) == len(FAMILIES)


def test_counters_equal_the_runs_own_figures(run):
    registry, _, result, summary = run
    assert value(registry, "tokenfactory_requests_completed_total") == \
        summary["requests"]["completed"] > 0
    assert value(registry, "tokenfactory_requests_submitted_total") == \
        summary["requests"]["submitted"]
    assert value(registry, "tokenfactory_request_ttft_seconds_count") == \
        summary["requests"]["completed"]
    assert value(registry, "tokenfactory_output_tokens_total") == \
        sum(r.output_tokens for r in result.requests)
    decisions = sum(value(registry, "tokenfactory_admission_decisions_total", reason=r.value)
                    for r in AdmissionReason)
    # one decision per sample but the final one (taken as the run ends)
    assert decisions == sum(n for _, _, n in result.decisions) == len(result.series) - 1
    moved = sum(s.value for m in registry.collect() for s in m.samples
                if s.name == "tokenfactory_kv_moved_bytes_total")
    assert moved == summary["resources"]["kv_bytes_moved"]
    energy = value(registry, "tokenfactory_energy_joules_total")
    assert energy == pytest.approx(result.energy_j, rel=1e-9)


@needs_promtool
@pytest.mark.parametrize("compat", [Compat.NONE, pytest.param(Compat.VLLM, marks=pytest.mark.slow)])
def test_promtool_check_metrics_passes_on_the_exposition(prepared, compat):
    registry = replay(prepared, compat)[0] if compat is Compat.VLLM else None
    if registry is None:
        registry = CollectorRegistry()
        Metrics(registry)
    text = generate_latest(registry)
    done = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True)
    findings = [line for line in done.stdout.decode().splitlines() if line.strip()]
    if compat is Compat.VLLM:
        # vLLM's own names carry colons, which the lint flags; nothing else may be flagged.
        assert all("should not contain ':'" in f and f.startswith("vllm:") for f in findings)
        assert b"vllm:num_requests_waiting{" in text
        assert b"vllm:time_to_first_token_seconds_bucket{" in text
    else:
        assert done.returncode == 0, findings


@needs_promtool
def test_the_full_run_exposition_passes_promtool(run):
    done = subprocess.run([PROMTOOL, "check", "metrics"], input=generate_latest(run[0]),
                          capture_output=True)
    assert done.returncode == 0, done.stdout.decode()


def test_metrics_om_is_grouped_timestamped_and_deterministic(run, prepared, tmp_path):
    _, recorder, result, _ = run
    a, b = tmp_path / "a.om", tmp_path / "b.om"
    recorder.write(a, 1_700_000_000.0)
    replay(prepared)[1].write(b, 1_700_000_000.0)
    assert a.read_bytes() == b.read_bytes()
    text = a.read_text()
    assert text.endswith("# EOF\n")
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(types) == len(set(types))  # each family once
    last: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or "_bucket{" in line:
            continue
        series, _, t = line.rpartition(" ")[0].rpartition(" ")[0], None, float(line.split()[-1])
        assert t > last.get(series, 0.0)
        last[series] = t
    lo, hi = time_range(a)
    assert lo == 1_700_000_000.0
    assert hi == pytest.approx(1_700_000_000.0 + result.simulated_s, abs=1e-3)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code = main(["replay", *SMALL, "--metrics-port", str(port), "--out",
                     str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2
    assert err == f"tokenfactory replay: error: --metrics-port {port}: address already in use\n"
    assert not (tmp_path / "run").exists()


def test_metrics_are_served_during_the_run_and_the_port_is_freed(tmp_path, capsys):
    port = _free_port()
    assert main(["replay", *SMALL, "--metrics-port", str(port), "--metrics-linger", "0",
                 "--json"]) == 0
    capsys.readouterr()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # released after the run


def test_backfill_of_a_directory_that_is_not_a_run(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    code = main(["metrics", "backfill", str(tmp_path / "x"), "--tsdb", str(tmp_path / "db")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "not a tokenfactory run directory" in err
    assert not (tmp_path / "db").exists()


@needs_promtool
def test_backfill_of_a_broken_file_leaves_no_tsdb(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["replay", *SMALL, "--out", str(run_dir)]) == 0
    with gzip.open(run_dir / "metrics.om.gz", "wt") as f:  # what --out writes, broken
        f.write("tokenfactory_x{ 1 2\n# EOF\n")
    code = main(["metrics", "backfill", str(run_dir), "--tsdb", str(tmp_path / "db")])
    err = capsys.readouterr().err
    assert code == 2 and err.strip().count("\n") == 0 and "promtool refused it" in err
    assert not (tmp_path / "db").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


@pytest.mark.slow
def test_replay_writes_metrics_om_and_compare_one_per_controller(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", *SMALL, "--json", "--out", str(out),
                 "--metrics-start", "2025-01-01T00:00:00"]) == 0
    summaries = json.loads(capsys.readouterr().out)["runs"]
    for name in ("retire", "buffered"):
        with open_text(out / f"{name}-metrics.om.gz") as f:
            text = f.read()
        assert f'run="{name}-seed0",controller="{name}"' in text
        completed = [line for line in text.splitlines()
                     if line.startswith("tokenfactory_requests_completed_total{")]
        assert float(completed[-1].split()[-2]) == summaries[name]["requests"]["completed"]


def _run_dir_with(tmp_path, text):
    from orchestrator.cli.metrics import RUN_MARKER

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / RUN_MARKER).write_text("")
    (run_dir / "metrics.om").write_text(text)
    return run_dir


@needs_promtool
def test_backfill_of_a_sample_line_without_a_timestamp_names_file_and_line(tmp_path, capsys):
    run_dir = _run_dir_with(tmp_path, "# TYPE x gauge\ngarbage\n# EOF\n")
    code = main(["metrics", "backfill", str(run_dir), "--tsdb", str(tmp_path / "db")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"{run_dir / 'metrics.om'}:2: expected a sample ending in a timestamp" in err
    assert not (tmp_path / "db").exists()


@needs_promtool
def test_backfill_into_a_directory_it_cannot_write_is_one_line(tmp_path, capsys, monkeypatch):
    run_dir = _run_dir_with(tmp_path, "x 1.0 1700000000.0\n# EOF\n")

    def refuse(**_kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("tempfile.mkdtemp", refuse)
    code = main(["metrics", "backfill", str(run_dir), "--tsdb", str(tmp_path / "db")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"--tsdb {tmp_path / 'db'}: cannot write in {tmp_path}: Permission denied" in err


def test_a_listener_reading_only_at_the_readings_writes_what_one_reading_every_sample_does(
        tmp_path):
    """Without /metrics the listener reads the cluster at the recorder's readings and at
    the last sample before an idle span (on_idle), not at every sample: the file is the
    same but for the links' utilisation, which is then over the time since the previous
    reading. Think times long enough for the run to skip idle spans."""
    settings = RunSettings(load=LoadOptions(max_sessions=3, think_scale=0.2))
    prepared = prepare([sample_path()], "auto", settings)
    texts = []
    for lazy in (False, True):
        registry = CollectorRegistry()
        recorder = OpenMetricsRecorder(registry, 5.0)
        listener = MetricsListener(Metrics(registry), "r", "buffered",
                                   readings=recorder if lazy else None)
        result, _ = run_replay(prepared, settings, listeners=[listener, recorder])
        recorder.finish(result.simulated_s)
        assert recorder.scrapes > 0 and len(recorder.busy) < recorder.scrapes  # idle spans
        recorder.write(tmp_path / f"{lazy}.om", 1_700_000_000.0)
        texts.append([line for line in (tmp_path / f"{lazy}.om").read_text().splitlines()
                      if "kv_link_utilisation" not in line])
    assert texts[0] == texts[1]


def test_a_recorder_reading_only_the_families_the_listener_wrote_writes_the_same_file(
        tmp_path):
    """With the listener's change feed (`changed`, and `take_observed` for the histograms'
    buckets) the recorder reads only the families written since its last reading: the
    same file as reading every family, vLLM's families included; and the feed is what it
    reads (a family written behind the
    listener's back is not seen until the listener writes it)."""
    settings = RunSettings(load=LoadOptions(max_sessions=3, think_scale=0.2))
    prepared = prepare([sample_path()], "auto", settings)
    texts, recorders = [], []
    for fed in (False, True):
        registry = CollectorRegistry()
        recorder = OpenMetricsRecorder(registry, 5.0)
        listener = MetricsListener(Metrics(registry, Compat.VLLM), "r", "buffered",
                                   readings=recorder)
        if fed:
            recorder.changed, recorder.observed = listener.changed, listener.take_observed
        result, _ = run_replay(prepared, settings, listeners=[listener, recorder])
        recorder.finish(result.simulated_s)
        recorder.write(tmp_path / f"{fed}.om", 1_700_000_000.0)
        texts.append((tmp_path / f"{fed}.om").read_text())
        recorders.append(recorder)
    assert texts[0] == texts[1]
    assert "vllm:num_requests_running" in texts[1]
    # The feed decides: a gauge moved without the listener is not read.
    recorder = recorders[1]
    gauge = listener.m["tokenfactory_admission_queue_requests"]
    gauge.labels("r", "buffered").set(1234.0)
    recorder.scrape(result.simulated_s + 10.0)
    recorder.changed = lambda: {gauge}
    recorder.scrape(result.simulated_s + 20.0)
    recorder.finish(result.simulated_s + 20.0)
    recorder.write(tmp_path / "after.om", 1_700_000_000.0)
    lines = [line for line in (tmp_path / "after.om").read_text().splitlines()
             if line.startswith("tokenfactory_admission_queue_requests{") and " 1234.0 " in line]
    stamps = [round(float(line.split()[-1]) - 1_700_000_000.0, 3) for line in lines]
    assert stamps[0] == round(result.simulated_s + 20.0, 3)


def test_the_metrics_file_leaves_out_the_live_process_collector(tmp_path):
    # Issue 35's tour: `replay --clock live --out DIR` crashed with a TypeError on the
    # live collector the run's registry holds for /metrics.
    from types import SimpleNamespace

    from prometheus_client import Counter

    from orchestrator.live.metrics import LiveCollector

    registry = CollectorRegistry()
    calls = Counter("tokenfactory_calls", "calls", registry=registry)
    registry.register(LiveCollector(SimpleNamespace(handles=[], lost_total=0, restarts_total=0,
                                                    bad_peers_total=0)))
    recorder = OpenMetricsRecorder(registry, 5.0, spill_dir=tmp_path)
    calls.inc(3)
    recorder.scrape(0.0, keep_all=True)
    recorder.scrape(5.0, keep_all=True)
    assert recorder.points > 0
    assert [f.wrapper for f in recorder._families_now()] == [calls]


def test_a_run_is_freed_before_its_summary_with_the_metrics_listener_attached():
    """The listener reading only at the readings keeps the last sample's run for the
    recorder's reading at the end; it reads it at the run's end (`on_end`) instead, so
    the run's state (in reference cycles) is collected before the summary is made, not
    kept beside it: no reference to the orchestrator is left once `run_replay` returns,
    the recorder not yet finished."""
    settings = RunSettings(load=LoadOptions(max_sessions=3, think_scale=0.2))
    prepared = prepare([sample_path()], "auto", settings)
    registry = CollectorRegistry()
    recorder = OpenMetricsRecorder(registry, 5.0)
    listener = MetricsListener(Metrics(registry), "r", "buffered", readings=recorder)

    class Witness:  # a listener holding the run only weakly
        ref = None

        def on_sample(self, orch, obs, now_s):
            if self.ref is None:
                self.ref = weakref.ref(orch)

    witness = Witness()
    result, _ = run_replay(prepared, settings, listeners=[listener, recorder, witness])
    assert witness.ref is not None and witness.ref() is None
    recorder.finish(result.simulated_s)  # reads what the listener read at the end
    assert recorder.scrapes > 0
