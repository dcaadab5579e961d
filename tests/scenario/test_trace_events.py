"""Trace events through a replay whose decode workers run out of KV: preempted calls show
where they left their batch, wait in the ready buffer, reload and finish, end to end."""

import dataclasses

from costmodel.model import load_model
from costmodel.phase import Phase
from orchestrator.control.config import ControlConfig
from orchestrator.control.policies import make_policy
from orchestrator.run.replay import Orchestrator
from orchestrator.run.trace_events import TraceRecorder
from tests.factories import single_call_sessions, small_cluster
from tests.unit.test_trace_events import assert_end_to_end, by_call, check_trace
from traces.replay import LoadOptions
from workers.clock import VirtualClock

LLAMA = load_model("llama-3.1-70b")


def squeezed(bound, decode_kv_tokens):
    """`bound` with each decode worker's HBM holding only `decode_kv_tokens` of KV."""
    workers = []
    for w in bound.workers:
        if w.phase is Phase.DECODE:
            budget = decode_kv_tokens * w.kv.kv_bytes_per_token_per_gpu
            w = dataclasses.replace(w, kv=dataclasses.replace(w.kv, budget_bytes_per_gpu=budget))
        workers.append(w)
    return dataclasses.replace(bound, workers=tuple(workers))


def test_preempted_calls_leave_a_mark_wait_and_come_back():
    control = ControlConfig(realloc_enabled=False)
    rec = TraceRecorder(seed=1)
    sessions = single_call_sessions([0.5 * i for i in range(8)], input_tokens=1536,
                                    output_tokens=1500)
    orch = Orchestrator(squeezed(small_cluster().bind(LLAMA), 8_000), sessions,
                        make_policy("buffered", control, 4), control, LoadOptions(), 1,
                        listeners=[rec])
    result = VirtualClock().run(orch.run())
    trace = rec.render(result.simulated_s)
    check_trace(trace)
    calls = by_call(trace)
    marks = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    preempted = [r for r in result.requests if r.preemptions]
    assert preempted, "the squeeze should force a preemption"
    assert len(marks) == sum(r.preemptions for r in result.requests)
    for req in result.requests:
        slices = calls[req.call_id]
        assert_end_to_end(slices, req.arrival_s, req.done_s)
        names = [e["name"] for e in slices]
        assert names.count("preempted") == req.preemptions
        assert names.count("decode") == req.preemptions + 1
    for mark in marks:  # on the decode lane the call left, where its decode slice ends
        call = calls[mark["args"]["call"]]
        left = next(e for e in call if e["name"] == "decode"
                    and round((e["ts"] + e["dur"]) * 1000) == round(mark["ts"] * 1000))
        assert (left["pid"], left["tid"]) == (mark["pid"], mark["tid"])
        after = call[call.index(left) + 1]
        assert after["name"] == "preempted" and after["pid"] == 1  # the ready buffer
