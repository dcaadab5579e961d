"""Latency as the user sees it, through a whole replay: the summary's ITL, TPOT, latency
parts, preemptions and decode slots agree with the calls they are computed from."""

import numpy as np
import pytest

from costmodel.model import load_model
from orchestrator.control.config import ControlConfig
from orchestrator.control.policies import make_policy
from orchestrator.run.replay import Orchestrator
from orchestrator.run.summary import summarize
from orchestrator.run.tables import summary_rows
from tests.factories import short_agent_sessions, small_cluster
from traces.replay import LoadOptions
from workers.clock import VirtualClock
from workers.request import LatencyPart

LLAMA = load_model("llama-3.1-70b")
PARTS = {p.key for p in LatencyPart}


@pytest.fixture(scope="module")
def replayed():
    control = ControlConfig(realloc_enabled=False)
    orch = Orchestrator(small_cluster().bind(LLAMA), short_agent_sessions(6, 8, seed=3),
                        make_policy("buffered", control, 4), control,
                        LoadOptions(sessions_per_hour=3600, think_scale=0.05), 1)
    result = VirtualClock().run(orch.run())
    return result, summarize(result, control.ttft_target_s, control.tpot_target_s)


def test_each_calls_parts_sum_to_its_end_to_end_latency(replayed):
    result, _ = replayed
    assert result.requests
    for r in result.requests:
        parts = r.latency_breakdown_s
        assert set(parts) == PARTS and min(parts.values()) >= 0
        assert sum(parts.values()) == pytest.approx(r.done_s - r.arrival_s, abs=1e-9)
        # TTFT: arrival to joining a decode batch, after the fill, its wait and the load.
        if r.output_tokens >= 2:
            assert r.ttft_s == pytest.approx(
                parts["admission_wait"] + parts["fill"] + parts["decode_wait"]
                + parts["transfer"], abs=1e-9)


def test_summary_reports_itl_parts_and_slots(replayed):
    result, summary = replayed
    # TPOT per call: first token to last over the tokens after the first.
    tpot = [r.tpot_s for r in result.requests if r.tpot_s is not None]
    assert summary["tpot_s"]["p50"] == pytest.approx(float(np.percentile(tpot, 50)))
    # ITL per token, recorded from the steps: every token after a call's first has one
    # gap, and a call's gaps add up to its first token to its last (stalls included), so
    # the recorder's tokens and their summed gaps are the calls' own.
    gaps = result.token_gaps.histogram()
    decoded = [r for r in result.requests if r.output_tokens >= 2]
    assert gaps.count == pytest.approx(sum(r.output_tokens - 1 for r in decoded))
    assert gaps.sums.sum() == pytest.approx(sum(r.done_s - r.first_token_s for r in decoded),
                                            rel=1e-9)
    assert summary["itl_s"] == gaps.percentiles()
    assert summary["itl_s"]["p50"] <= summary["itl_s"]["p99"]
    assert set(summary["latency_breakdown_s"]) == PARTS
    fills = [r.parts_s[LatencyPart.FILL] for r in result.requests]
    assert summary["latency_breakdown_s"]["fill"]["p99"] == pytest.approx(
        float(np.percentile(fills, 99)))
    # Two decode workers of TP4 attention (one rank each), target batch 4.
    assert summary["resources"]["decode_slots"] == 8
    assert summary["requests"]["preempted"] == sum(1 for r in result.requests if r.preemptions)
    assert summary["tokens"]["recomputed"] == sum(r.recomputed_tokens for r in result.requests)
    labels = [label for label, _ in summary_rows({"run": summary})]
    assert "ITL p50 / p99 (ms)" in labels and "decode slots" in labels


def test_series_holds_the_parts_per_period(replayed):
    result, _ = replayed
    s = result.series
    col = s.array("decode_wait_p99_s")
    assert len(col) == len(s)
    done = s.array("completed")
    assert np.all(np.isnan(col) == (done == 0))
    assert np.nanmax(s.array("decode_p50_s")) > 0
