"""Prefixes shared across sessions (traces.shared_prefix): an assumption for formats with
per-file block ids, as the format hints by default; copies of a repeated trace keep it."""

import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import TRACE_DATA, run_cli
from traces import read_sessions, sample_path
from traces.model import Call, Session
from traces.replay import repeated_session
from traces.shared_prefix import SharedChains, share_prefix, shared_blocks


@pytest.fixture(scope="module")
def sample():
    return list(read_sessions([sample_path()], "auto"))


def test_the_first_n_tokens_of_every_session_become_one_chain(sample):
    chains = SharedChains()
    a, b = (share_prefix(s, 4096, chains) for s in sample[:2])
    k = 4096 // a.calls[0].block_size
    assert a.calls[0].block_ids[:k] == b.calls[0].block_ids[:k]
    assert shared_blocks(a.calls[0].block_ids) == k
    assert a.calls[0].block_ids[k] != b.calls[0].block_ids[k]  # the rest stays their own
    for before, after in zip(sample[0].calls, a.calls, strict=True):  # own reuse unchanged
        assert len(after.block_ids) == len(before.block_ids)
        assert after.cached_tokens == before.cached_tokens
    follows = [i for i in range(1, len(a.calls)) if sample[0].calls[i].block_ids[:k + 5]
               == sample[0].calls[0].block_ids[:k + 5]]
    assert follows and all(a.calls[i].block_ids[:k + 5] == a.calls[0].block_ids[:k + 5]
                           for i in follows)
    assert chains.count == 1


def test_by_default_sessions_share_their_tool_definitions_when_of_one_length(sample):
    chains = SharedChains()
    shared = [share_prefix(s, None, chains) for s in sample]
    hints = [s.shared_prefix_tokens for s in sample]
    assert all(h and h > 0 for h in hints)
    assert chains.count == len(set(hints))
    for s, h in zip(shared, hints, strict=True):
        assert shared_blocks(s.calls[0].block_ids) == min(h // s.calls[0].block_size,
                                                          len(s.calls[0].block_ids))
    assert share_prefix(sample[0], 0, chains) is sample[0]


def test_copies_of_a_repeated_trace_keep_the_shared_prefix_and_nothing_else(sample):
    base = share_prefix(sample[0], 4096, SharedChains())
    copy = repeated_session(base, 3)
    k = 4096 // base.calls[0].block_size
    for a, b in zip(base.calls, copy.calls, strict=True):
        assert a.block_ids[:k] == b.block_ids[:k]
        assert a.block_ids[k] != b.block_ids[k] and a.block_ids[k + 1:] == b.block_ids[k + 1:]


def replay(capsys, *extra):
    code, out, err = run_cli(["replay", "--max-sessions", "6", "--json", "--no-progress",
                              *extra], capsys)
    assert code == 0, err
    return json.loads(out)["cache"]


def test_a_shared_prefix_is_found_in_another_sessions_kv(capsys):
    none = replay(capsys, "--shared-prefix-tokens", "0")
    shared = replay(capsys, "--shared-prefix-tokens", "8192")
    assert none["shared_prefix"] == {"sessions": 0, "tokens": 0, "chains": 0}
    assert shared["shared_prefix"] == {"sessions": 6, "tokens": 6 * 8192, "chains": 1}
    # Five of the six sessions find the 8,192 tokens another session wrote.
    assert shared["cross_session_hit_tokens"] - none["cross_session_hit_tokens"] >= 4 * 8192


def test_mooncakes_global_ids_are_shared_across_requests_already(capsys):
    code, out, err = run_cli(["replay", str(TRACE_DATA / "mooncake" / "synthetic_trace.jsonl"),
                              "--max-sessions", "300", "--json", "--no-progress"], capsys)
    assert code == 0, err
    cache = json.loads(out)["cache"]
    assert cache["cross_session_hit_tokens"] > 0
    assert cache["shared_prefix"]["sessions"] == 0


def _renamed_one_by_one(ids: tuple[int, ...], mapping: dict[int, int]) -> tuple[int, ...]:
    """The leading ids found in the mapping renamed, one id at a time."""
    head = 0
    while head < len(ids) and ids[head] in mapping:
        head += 1
    return tuple(mapping[x] for x in ids[:head]) + ids[head:]


@given(st.lists(st.integers(1, 12), min_size=1, max_size=8),
       st.lists(st.lists(st.integers(1, 14), max_size=12), min_size=1, max_size=6),
       st.integers(0, 8))
def test_a_session_is_renamed_as_one_id_at_a_time_would(first, tails, keep):
    """Calls that start with the whole prefix (the fast path) or part of it, in another
    order, or with one of its ids again right after it: renamed as a walk id by id."""
    block_size = 16
    ids0 = tuple(first)
    calls = [ids0] + [ids0[:keep] + tuple(t) for t in tails]
    session = Session("s", "test", None, tuple(Call(
        session_id="s", index=i, input_tokens=len(ids) * block_size, cached_tokens=0,
        new_tokens=len(ids) * block_size, output_tokens=1, think_s=0.0, is_subagent=False,
        reset_before=False, block_size=block_size, block_ids=ids) for i, ids in enumerate(calls)))
    tokens = len(first) * block_size
    shared = share_prefix(session, tokens, SharedChains())
    k = next((i for i, x in enumerate(ids0) if ids0.index(x) != i), len(ids0))
    base = SharedChains().base(tokens)
    mapping = {x: base + i for i, x in enumerate(ids0[:k])}
    for before, after in zip(session.calls, shared.calls, strict=True):
        assert after.block_ids == _renamed_one_by_one(before.block_ids, mapping)
        assert after == replace(before, block_ids=after.block_ids)


def test_a_sessions_calls_are_renamed_as_they_are_read(sample, monkeypatch):
    """Sharing a prefix renames no call up front: a session in flight holds the trace's
    calls and the one or two at hand; read in order, as a session reads them (each as the
    next call, then as its own), every call is renamed once, to what it was."""
    import traces.shared_prefix as shared_prefix

    made = []
    renamed = shared_prefix._with_block_ids
    monkeypatch.setattr(shared_prefix, "_with_block_ids",
                        lambda call, ids: made.append(call.index) or renamed(call, ids))
    session = sample[0]
    shared = share_prefix(session, 4096, SharedChains())
    assert made == []
    calls = shared.calls
    for i in range(len(calls)):
        call = calls[i]
        following = calls[i + 1] if i + 1 < len(calls) else None
        assert following is None or following.index == i + 1
        assert call.index == i
    assert made == list(range(len(session.calls)))
    eager = [replace(c, block_ids=_renamed_one_by_one(
        c.block_ids, dict(zip(session.calls[0].block_ids[:4096 // c.block_size],
                              shared.calls[0].block_ids, strict=False))))
        for c in session.calls]
    assert list(shared.calls) == eager
