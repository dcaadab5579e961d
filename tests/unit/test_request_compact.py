"""A completed call keeps what the summary reads and drops its block ids."""

import pytest

from costmodel.model import load_model
from orchestrator.control.config import ControlConfig
from orchestrator.control.policies import make_policy
from orchestrator.run.replay import Orchestrator
from orchestrator.run.summary import summarize
from tests.factories import short_agent_sessions, small_cluster
from traces.replay import LoadOptions
from workers.clock import VirtualClock
from workers.request import LatencyPart, Request


def test_compact_drops_the_payload_of_a_done_call_and_keeps_its_figures():
    req = Request(7, "s", input_tokens=640, output_tokens=5, block_ids=tuple(range(10)),
                  writeback_block_ids=tuple(range(12)), arrival_s=1.0)
    req.kv_chain = ("blob",)
    req.enter(LatencyPart.DECODE, 2.0)
    req.first_token_s = 2.0
    req.generated = 5
    req.finish(3.0)
    req.compact()
    assert req.block_ids == req.writeback_block_ids == req.kv_chain == ()
    assert req.ttft_s == 1.0 and req.itl_s == pytest.approx(0.25)
    assert req.latency_breakdown_s["decode"] == 1.0 and req.input_tokens == 640


def test_compacting_a_call_in_flight_is_misuse():
    with pytest.raises(RuntimeError, match="call 3 .* QUEUED"):
        Request(3, "s", 64, 1, block_ids=(1,)).compact()


def _replay(sessions):
    control = ControlConfig(realloc_enabled=False)
    orch = Orchestrator(small_cluster().bind(load_model("llama-3.1-70b")), sessions,
                        make_policy("buffered", control, 4), control,
                        LoadOptions(sessions_per_hour=3600, think_scale=0.05), 2)
    result = VirtualClock().run(orch.run())
    summary = summarize(result, control.ttft_target_s, control.tpot_target_s)
    summary["sim"].pop("wall_s")
    return result, summary


def test_a_replay_keeps_completed_calls_compact_and_its_summary_unchanged(monkeypatch):
    sessions = short_agent_sessions(3, 5, seed=6)
    result, summary = _replay(sessions)
    assert len(result.requests) == 15
    assert all(r.block_ids == () and r.kv_chain == () for r in result.requests)
    monkeypatch.setattr(Request, "compact", lambda self: None)
    kept, unchanged = _replay(sessions)
    assert any(r.block_ids for r in kept.requests)  # the calls did carry ids
    assert summary == unchanged
