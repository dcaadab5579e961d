"""Replays in virtual time: every call completes exactly once, runs are deterministic,
and the controllers behave as documented on a small cluster."""

import itertools

import pytest

from costmodel.model import load_model
from orchestrator.control.config import ControlConfig
from orchestrator.control.policies import make_policy
from orchestrator.run.replay import Orchestrator
from orchestrator.run.summary import summarize
from tests.factories import short_agent_sessions, small_cluster
from traces.replay import LoadOptions
from workers.clock import VirtualClock

LLAMA = load_model("llama-3.1-70b")


def replay(sessions, controller="buffered", load=None, control=None, seed=1):
    control = control or ControlConfig(realloc_enabled=False)
    orch = Orchestrator(small_cluster().bind(LLAMA), sessions,
                        make_policy(controller, control, 4), control,
                        load or LoadOptions(sessions_per_hour=3600, think_scale=0.05), seed)
    result = VirtualClock().run(orch.run())
    return result, summarize(result, control.ttft_target_s, control.tpot_target_s)


@pytest.mark.parametrize("controller", ["retire", "buffered", "predictive"])
def test_every_call_completes_exactly_once(controller):
    sessions = short_agent_sessions(6, 8, seed=3)
    result, summary = replay(sessions, controller)
    calls = sum(len(s.calls) for s in sessions)
    req = summary["requests"]
    assert req["lost"] == 0 and req["in_flight"] == 0
    assert req["submitted"] == req["completed"] + req["rejected"]
    if controller != "predictive":
        assert req["completed"] == calls
    ids = [r.call_id for r in result.requests]
    assert len(ids) == len(set(ids))
    # Conservation held at every sample (the shell raises otherwise) and at the end.
    s = result.series
    for sub, done, rej, fly in zip(s.submitted_total, s.completed_total, s.rejected_total,
                                   s.in_flight, strict=True):
        assert sub == done + rej + fly


def test_same_inputs_and_seed_give_the_same_numbers():
    sessions = short_agent_sessions(5, 6, seed=4)
    a, sa = replay(sessions)
    b, sb = replay(sessions)
    for s in (sa, sb):
        s["sim"].pop("wall_s")
    assert sa == sb
    assert a.series.decode_running == b.series.decode_running


def test_a_different_seed_moves_session_starts():
    sessions = short_agent_sessions(5, 6, seed=4)
    a, _ = replay(sessions, seed=1)
    b, _ = replay(sessions, seed=2)
    assert a.first_session_s != b.first_session_s


class _Broken:
    name = "broken"

    def decide(self, obs, now_s):
        return {"admit": 3}


def test_a_policy_returning_the_wrong_shape_stops_the_run_with_its_name():
    from orchestrator.run.fast_loop import PolicyError

    control = ControlConfig(realloc_enabled=False)
    orch = Orchestrator(small_cluster().bind(LLAMA), short_agent_sessions(2, 3), _Broken(),
                        control, LoadOptions(sessions_per_hour=3600), 1)
    with pytest.raises(PolicyError, match="controller 'broken' returned dict, not an "
                                          "AdmissionDecision"):
        VirtualClock().run(orch.run())


class _BrokenLater:
    """Decides as `retire` does until 200 s, then returns the wrong shape."""

    name = "broken-later"

    def __init__(self, control):
        self.inner = make_policy("retire", control, 4)

    def decide(self, obs, now_s):
        return {"admit": 3} if now_s > 200.0 else self.inner.decide(obs, now_s)


def test_a_policy_returning_the_wrong_shape_in_a_skipped_idle_span_stops_the_run_too():
    """The periods an idle span skips are decided one by one for a policy without
    `skip_idle`: each decision is checked there as well (else AttributeError)."""
    from orchestrator.run.fast_loop import PolicyError
    from tests.factories import single_call_sessions

    control = ControlConfig(realloc_enabled=False)
    sessions = single_call_sessions([0.0, 1000.0], input_tokens=256, output_tokens=64)
    orch = Orchestrator(small_cluster().bind(LLAMA), sessions, _BrokenLater(control), control,
                        LoadOptions(), 1)
    with pytest.raises(PolicyError, match="controller 'broken-later' returned dict"):
        VirtualClock().run(orch.run())


SLOW_LOOP = ControlConfig(realloc_enabled=True, realloc_dwell_s=120.0, realloc_ewma_s=30.0,
                          realloc_threshold=0.3)


def decode_heavy_replay(pools):
    """400 single calls of 256 input and 2,000 output tokens, one every 0.5 s, on three
    H200 nodes with `pools`, under the buffered controller and the slow loop."""
    from tests.factories import single_call_sessions

    sessions = single_call_sessions([0.5 * i for i in range(400)], input_tokens=256,
                                    output_tokens=2000)
    nodes = [{"name": f"n{i}", "rack": "r0", "hardware": "h200", "gpus": 8, "dram_gb": 2000,
              "dram_gb_per_s": 200} for i in range(3)]
    cluster = small_cluster(nodes=nodes, pools=pools).bind(LLAMA)
    orch = Orchestrator(cluster, sessions, make_policy("buffered", SLOW_LOOP, 4), SLOW_LOOP,
                        LoadOptions(), 1)
    result = VirtualClock().run(orch.run())
    return cluster, orch, result, summarize(result, SLOW_LOOP.ttft_target_s,
                                            SLOW_LOOP.tpot_target_s)


def test_slow_loop_moves_a_worker_at_its_real_cost():
    """Decode-heavy traffic on a cluster with idle fill capacity: the slow loop moves a
    fill worker to decode, which drains it and loads the decode slice's weights first."""
    _, _, result, summary = decode_heavy_replay([
        {"name": "prefill", "phase": "prefill", "nodes": ["n0"], "gpus": 8, "tp": 4,
         "precision": "bf16"},
        {"name": "midfill", "phase": "midfill", "nodes": ["n1"], "gpus": 4, "tp": 4,
         "precision": "bf16"},
        {"name": "decode", "phase": "decode", "nodes": ["n2", "n1"], "gpus": 4, "tp": 4,
         "precision": "bf16", "target_batch": 4},
    ])
    assert summary["requests"]["lost"] == 0
    moves = result.reconfigurations
    assert moves and moves[0][2] in ("prefill", "midfill") and moves[0][3] == "decode"
    assert summary["control"]["reconfigurations"] == len(moves)
    times = [m[0] for m in moves]
    assert all(b - a >= SLOW_LOOP.realloc_dwell_s for a, b in itertools.pairwise(times))
    workers = result.series.workers_by_pool
    assert workers[-1]["decode"] > workers[0]["decode"]


def test_slow_loop_reshapes_a_worker_into_a_pool_of_another_size():
    """The donor pool's workers have 4 GPUs at FP8, the decode pool's 8 at BF16: the moved
    worker serves decode at TP4 BF16 on its own 4 GPUs, its HBM tier sized to that layout's
    KV room, and every call completes."""
    cluster, orch, result, summary = decode_heavy_replay([
        {"name": "prefill", "phase": "prefill", "nodes": ["n0"], "gpus": 8, "tp": 4,
         "precision": "fp8"},
        {"name": "midfill", "phase": "midfill", "nodes": ["n1"], "gpus": 8, "tp": 8,
         "precision": "bf16"},
        {"name": "decode", "phase": "decode", "nodes": ["n2"], "gpus": 8, "tp": 8,
         "precision": "bf16", "target_batch": 4},
    ])
    assert summary["requests"]["completed"] == summary["requests"]["submitted"] == 400
    assert summary["requests"]["lost"] == 0
    assert result.reconfigurations[0][2:] == ("prefill", "decode")
    moved = next(w for w in orch.runtime.decode_workers.values() if w.spec.name != "decode-0")
    assert (moved.spec.layout.instance_gpus, moved.spec.layout.tp) == (4, 4)
    assert orch.runtime.store.placement.capacity_bytes[moved.hbm] == moved.spec.kv_capacity_bytes
    assert moved.spec.kv_capacity_bytes < cluster.workers[0].kv_capacity_bytes  # BF16 weights
    assert moved.state().tokens_done > 0


@pytest.mark.slow
def test_same_numbers_in_a_new_process_whatever_the_hash_seed():
    """Determinism must not rest on one interpreter's string hashing."""
    import json
    import os
    import subprocess
    import sys

    argv = [sys.executable, "-m", "orchestrator.cli", "replay", "--max-sessions", "4",
            "--think-scale", "0.02", "--sessions-per-hour", "3600", "--json", "--no-progress"]
    outs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
        summary = json.loads(done.stdout)
        summary["sim"].pop("wall_s")
        outs.append(summary)
    assert outs[0] == outs[1]
