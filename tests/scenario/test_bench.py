"""`tokenfactory bench` end to end on one HGX H100 with Llama-3.1-70B: two concurrencies,
few calls. The users' calls hold the concurrency, the figures follow from the calls and
the tokens streamed, the JSON has its documented shape, --out is written whole."""

import itertools
import json

import numpy as np
import pytest

from costmodel.model import load_model
from costmodel.precision import Precision
from orchestrator.bench.frontier import FRONTIER_KEYS, frontier_mask
from orchestrator.bench.load import BenchLoad
from orchestrator.bench.measure import call_order, steady_window
from orchestrator.bench.plan import plan_points
from tests.conftest import run_cli

ARGS = ["bench", "--model", "llama-3.1-70b", "--hardware", "h100", "--gpus", "8",
        "--isl", "512", "--osl", "64", "--range-ratio", "0.5", "--concurrency", "1,4",
        "--calls-per-user", "2", "--workers", "1", "--no-progress"]
LLAMA = load_model("llama-3.1-70b")


@pytest.fixture(scope="module")
def bench_json():
    import contextlib
    import io

    from orchestrator.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*ARGS, "--json", "--engine", "vllm"]) == 0
    return json.loads(out.getvalue())


def test_every_layout_runs_at_every_concurrency_and_the_json_has_its_shape(bench_json):
    points, front = bench_json["points"], bench_json["frontier"]
    assert list(bench_json) == ["points", "frontier"]
    layouts = list(dict.fromkeys(p["layout"] for p in points))
    # 8 H100: replicas of TP1, TP2, TP4, TP8, and prefill/decode pairs from the planner.
    assert {"agg 8x TP1", "agg 4x TP2", "agg 2x TP4", "agg 1x TP8"} <= set(layouts)
    assert any(name.startswith("disagg ") for name in layouts)
    assert [(p["layout"], p["concurrency"]) for p in points] == [
        (name, c) for name in layouts for c in (1, 4)]
    for p in points:
        assert p["gpus"] == 8 and p["engine"] == "vllm" and p["warmup_calls_per_user"] == 1
        assert set(p["ttft_s"]) == set(p["itl_s"]) == {"p50", "p90", "p99"}
        assert p["interactivity"] > 0 and p["total_tokens_per_s_per_gpu"] > \
            p["output_tokens_per_s_per_gpu"] > 0
        # Interactivity is 1 / mean TPOT, and a call's mean gap sits within its tokens'.
        assert p["interactivity"] == pytest.approx(1 / p["tpot_s"]["mean"])
        assert p["itl_s"]["p50"] <= p["itl_s"]["p99"]
    assert front and all(tuple(f) == FRONTIER_KEYS for f in front)
    on = frontier_mask(points)
    assert sorted((f["layout"], f["concurrency"]) for f in front) == sorted(
        (points[i]["layout"], points[i]["concurrency"]) for i in np.flatnonzero(on))


def test_more_users_give_more_throughput_and_less_interactivity(bench_json):
    by = {(p["layout"], p["concurrency"]): p for p in bench_json["points"]}
    for name in ("agg 1x TP8", "agg 2x TP4"):
        one, four = by[name, 1], by[name, 4]
        assert four["total_tokens_per_s_per_gpu"] > 2 * one["total_tokens_per_s_per_gpu"]
        assert four["interactivity"] <= one["interactivity"]
    # At one user, more GPUs per replica decode faster: TP8 over TP1.
    assert by["agg 1x TP8", 1]["interactivity"] > 2 * by["agg 8x TP1", 1]["interactivity"]


def test_the_users_hold_the_concurrency_exactly_once_warm():
    from orchestrator.bench.router import BalancedRouter
    from orchestrator.control.config import ControlConfig
    from orchestrator.control.policies import make_policy
    from orchestrator.run.replay import Orchestrator
    from traces.replay import LoadOptions
    from workers.clock import VirtualClock

    load = BenchLoad(isl=512, osl=64, range_ratio=0.5, calls_per_user=3, seed=4)
    plan = plan_points(LLAMA, load, [6], hardware="h100", gpus=8, precision=None,
                       kv_precision=Precision.BF16, mtp=0)
    task = next(t for t in plan.tasks if t.layout.name == "agg 2x TP4")
    control = ControlConfig(realloc_enabled=False)
    router = BalancedRouter()
    orch = Orchestrator(task.cluster.bind(LLAMA), load.sessions(6),
                        make_policy("local", control, 4), control, LoadOptions(), 0,
                        listeners=[router], router=router, keep_token_gaps=True)
    result = VirtualClock().run(orch.run())
    calls = result.requests
    assert len(calls) == 6 * 4  # K = 3 after one warm-up call each
    arrival, done = np.asarray(calls.column("arrival_s")), np.asarray(calls.column("done_s"))
    # Calls in flight after each instant's events (an answer and its successor's
    # arrival share an instant).
    times, index = np.unique(np.concatenate((arrival, done)), return_inverse=True)
    steps = np.zeros(len(times))
    np.add.at(steps, index, np.concatenate((np.ones(len(arrival)), -np.ones(len(done)))))
    in_flight = np.cumsum(steps)
    assert in_flight.max() == 6  # never more than C
    lo, hi = steady_window(calls, call_order(calls), 1)
    assert 0 < lo < hi
    inside = (times >= lo) & (times < hi)
    assert inside.sum() > 10 and set(in_flight[inside]) == {6}  # exactly C once warm
    assert in_flight[times < hi].min() == 6 and in_flight[-1] == 0
    # Every user's calls follow one another: each arrives when the one before is done.
    order = call_order(calls)
    for sid in {calls.value("session_id", i) for i in range(len(calls))}:
        rows = sorted((order[i], i) for i in range(len(calls))
                      if calls.value("session_id", i) == sid)
        assert [o for o, _ in rows] == [0, 1, 2, 3]
        for (_, a), (_, b) in itertools.pairwise(rows):
            assert arrival[b] == pytest.approx(done[a], abs=1e-9)


def test_out_writes_the_table_and_the_plot_whole(tmp_path, capsys):
    out = tmp_path / "run"
    code, stdout, err = run_cli([*ARGS, "--concurrency", "4", "--out", str(out)], capsys)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == [
        ".tokenfactory-run", "bench.json", "frontier.csv", "frontier.png", "points.csv"]
    header = (out / "points.csv").read_text().splitlines()[0].split(",")
    assert {"concurrency", "layout", "gpus", "interactivity", "total_tokens_per_s_per_gpu",
            "ttft_s.p99", "itl_s.p99", "e2e_s.p50"} <= set(header)
    assert (out / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "on the frontier" in stdout
    code, stdout, err = run_cli([*ARGS, "--out", str(out)], capsys)
    assert code == 2 and err.count("\n") == 1 and f"--out {out}: exists" in err


def test_at_one_user_the_window_holds_the_measured_calls_whole():
    """One user: the window runs from the warm-up call's end to the last call's, so it
    holds every measured call's tokens, input and output, and nothing else."""
    from orchestrator.bench.run import BenchShared, run_point

    load = BenchLoad(isl=512, osl=64, range_ratio=0.5, calls_per_user=3, seed=2)
    plan = plan_points(LLAMA, load, [1], hardware="h100", gpus=8, precision=None,
                       kv_precision=Precision.BF16, mtp=0)
    task = next(t for t in plan.tasks if t.layout.name == "agg 1x TP8")
    p = run_point(BenchShared(LLAMA, load, None), task)
    inputs, outputs = load.lengths(1)
    lo, hi = p["window_s"]
    measured = slice(load.warmup_calls, None)
    tokens = inputs[0, measured].sum() + outputs[0, measured].sum()
    assert p["total_tokens_per_s_per_gpu"] == pytest.approx(tokens / (hi - lo) / 8, rel=1e-12)
    assert p["output_tokens_per_s_per_gpu"] == pytest.approx(
        outputs[0, measured].sum() / (hi - lo) / 8, rel=1e-12)
    assert p["calls_measured"] == 3 and p["steady_window"]
