"""Repeated sessions are built as they are read and share the trace's block ids, yet a
copy's calls find exactly the prefixes the same calls would with every id shifted."""

import dataclasses

import pytest

import traces.replay
from costmodel.model import load_model
from orchestrator.control.config import ControlConfig
from orchestrator.control.policies import make_policy
from orchestrator.run.replay import Orchestrator
from orchestrator.run.summary import summarize
from storage.blobs import BlobIndex
from tests.factories import short_agent_sessions, small_cluster
from traces.replay import REPEAT_SHIFT, LoadOptions, repeat_sessions, repeated_session
from workers.clock import VirtualClock


def fully_shifted(session, k):
    """The copy as it used to be built: every block id of every call shifted."""
    sid = f"{session.session_id}~{k}"
    shift = k << REPEAT_SHIFT
    calls = tuple(dataclasses.replace(c, session_id=sid,
                                      block_ids=tuple(b + shift for b in c.block_ids))
                  for c in session.calls)
    return dataclasses.replace(session, session_id=sid, calls=calls)


def test_a_copy_reads_like_the_session_and_shares_its_ids():
    base = short_agent_sessions(1, 6, seed=2)[0]
    copy = repeated_session(base, 3)
    assert copy.session_id == f"{base.session_id}~3" and len(copy.calls) == len(base.calls)
    calls = list(copy.calls)
    for i, (mine, theirs) in enumerate(zip(calls, base.calls, strict=True)):
        assert mine.index == i and mine.session_id == copy.session_id
        assert mine.input_tokens == theirs.input_tokens and mine.think_s == theirs.think_s
        assert mine.block_ids[0] == theirs.block_ids[0] + (3 << REPEAT_SHIFT)
        assert all(a is b for a, b in zip(mine.block_ids[1:], theirs.block_ids[1:],
                                          strict=True))
    assert copy.calls[-1] == calls[-1] and copy.calls[1:3] == tuple(calls[1:3])
    with pytest.raises(IndexError):
        copy.calls[len(calls)]


def test_repeat_yields_the_trace_then_its_copies_in_order():
    base = short_agent_sessions(2, 2, seed=1)
    ids = [s.session_id for s in repeat_sessions(base, 3)]
    names = [s.session_id for s in base]
    assert ids == [*names, *(f"{n}~1" for n in names), *(f"{n}~2" for n in names)]


def test_copies_match_prefixes_as_fully_shifted_copies_do():
    """Write every call of two copies into one index each way; each call then finds the
    same number of cached blocks, and no call finds a block of another copy."""
    base = short_agent_sessions(3, 5, seed=5)
    found = {}
    for make in (repeated_session, fully_shifted):
        index = BlobIndex(base[0].calls[0].block_size, 1)
        matched = []
        for k in (1, 2):
            for session in base:
                for call in make(session, k).calls:
                    matched.append(index.match(call.block_ids).matched_blocks)
                    for blob in index.describe(call.block_ids)[1]:
                        index.register(blob)
        found[make] = matched
    assert found[repeated_session] == found[fully_shifted]
    # The second copy starts from nothing the first wrote: its first call finds nothing.
    calls_per_copy = sum(len(s.calls) for s in base)
    assert found[fully_shifted][calls_per_copy] == 0
    assert any(found[fully_shifted])  # the trace does share prefixes


def test_a_repeated_replay_equals_the_fully_shifted_one(monkeypatch):
    sessions = short_agent_sessions(3, 4, seed=4)
    control = ControlConfig(realloc_enabled=False)
    load = LoadOptions(sessions_per_hour=3600, think_scale=0.05, repeat=3)
    summaries = []
    for make in (repeated_session, fully_shifted):
        monkeypatch.setattr(traces.replay, "repeated_session", make)
        orch = Orchestrator(small_cluster().bind(load_model("llama-3.1-70b")), sessions,
                            make_policy("buffered", control, 4), control, load, 1)
        summary = summarize(VirtualClock().run(orch.run()), control.ttft_target_s,
                            control.tpot_target_s)
        summary["sim"].pop("wall_s")
        summaries.append(summary)
    assert summaries[0]["requests"]["completed"] == 3 * sum(len(s.calls) for s in sessions)
    assert summaries[0] == summaries[1]
