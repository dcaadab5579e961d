"""Completed calls kept as columns read back as the requests held them, and the summary
computed from the columns equals the one computed from the requests themselves."""

import math

import numpy as np
import pytest

from costmodel.model import load_model
from orchestrator.control.config import ControlConfig
from orchestrator.control.policies import make_policy
from orchestrator.run.completed import CompletedCalls
from orchestrator.run.replay import Orchestrator
from orchestrator.run.summary import summarize
from tests.factories import short_agent_sessions, small_cluster
from traces.replay import LoadOptions
from workers.clock import VirtualClock
from workers.request import LatencyPart, Request

FIELDS = ("call_id", "session_id", "input_tokens", "output_tokens", "interactive",
          "arrival_s", "prefix_tokens", "own_cached_tokens", "computed_tokens",
          "fill_start_s", "fill_end_s", "decode_start_s", "first_token_s", "done_s",
          "generated", "fill_worker", "decode_worker", "preemptions", "recomputed_tokens",
          "parts_s", "ttft_s", "tpot_s", "decode_s_per_token", "latency_breakdown_s", "state")


def _done(call_id: int, *, decode: bool) -> Request:
    req = Request(call_id, f"s{call_id}", input_tokens=640, output_tokens=5 if decode else 1,
                  block_ids=tuple(range(10)), arrival_s=0.1 * call_id, interactive=decode)
    req.fill_worker = "fill-0"
    req.enter(LatencyPart.FILL, req.arrival_s + 0.3)
    if decode:
        req.decode_worker = "decode-1"
        req.first_token_s = req.arrival_s + 0.7
        req.enter(LatencyPart.DECODE, req.arrival_s + 0.7)
        req.generated = 5
    req.finish(req.arrival_s + 1.9)
    return req


def test_a_row_reads_as_the_request_it_was():
    reqs = [_done(1, decode=True), _done(2, decode=False), _done(3, decode=True)]
    calls = CompletedCalls()
    for req in reqs:
        calls.append(req)
    assert len(calls) == 3
    for row, req in zip(calls, reqs, strict=True):
        for name in FIELDS:
            assert getattr(row, name) == getattr(req, name), name
        assert row.block_ids == row.writeback_block_ids == row.kv_chain == ()
    assert calls[1].decode_worker is None and calls[1].first_token_s is None
    assert calls[1].ttft_s is None and calls[1].tpot_s is None
    assert calls[-1].call_id == 3 and [r.call_id for r in calls[:2]] == [1, 2]
    with pytest.raises(IndexError):
        calls[3]
    with pytest.raises(AttributeError):
        calls[0].no_such_field  # noqa: B018


def test_a_call_in_flight_is_not_kept():
    with pytest.raises(RuntimeError, match="call 4 .* QUEUED"):
        CompletedCalls().append(Request(4, "s", 64, 1))


class _Keep:
    """The live requests as the orchestrator hands them to its listeners."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    def on_done(self, orch, req, now_s) -> None:
        self.requests.append(req)


def test_a_replay_keeps_every_completed_call_and_its_summary_reads_them():
    control = ControlConfig(realloc_enabled=False)
    keep = _Keep()
    orch = Orchestrator(small_cluster().bind(load_model("llama-3.1-70b")),
                        short_agent_sessions(3, 5, seed=7), make_policy("buffered", control, 4),
                        control, LoadOptions(sessions_per_hour=3600, think_scale=0.05), 2,
                        listeners=[keep])
    result = VirtualClock().run(orch.run())
    summary = summarize(result, control.ttft_target_s, control.tpot_target_s)
    reqs = keep.requests
    assert len(result.requests) == len(reqs) == 15
    for row, req in zip(result.requests, reqs, strict=True):
        for name in FIELDS:
            assert getattr(row, name) == getattr(req, name), name
    # The summary's column passes give what Request's own properties give.
    ttft = np.array([r.ttft_s for r in reqs if r.ttft_s is not None])
    tpot = np.array([r.tpot_s for r in reqs if r.tpot_s is not None])
    assert summary["ttft_s"]["p90"] == float(np.percentile(ttft, 90))
    # TPOT is per call (the client's first token to last); ITL, per token, is not a
    # column of the calls (tests/unit/test_token_gaps.py).
    assert summary["tpot_s"]["p50"] == float(np.percentile(tpot, 50))
    for part in LatencyPart:
        values = np.array([r.parts_s[part] for r in reqs])
        assert summary["latency_breakdown_s"][part.key]["p99"] == float(np.percentile(values, 99))
    assert summary["cache"]["prefix_hit_tokens"] == sum(r.prefix_tokens for r in reqs) > 0
    assert summary["throughput"]["input_tokens_per_s"] == (
        sum(r.input_tokens for r in reqs) / result.simulated_s)
    good = sum(r.output_tokens for r in reqs if r.ttft_s <= control.ttft_target_s
               and (r.tpot_s is None or r.tpot_s <= control.tpot_target_s))
    assert math.isclose(summary["goodput"]["output_tokens_per_s"] * result.simulated_s, good)
