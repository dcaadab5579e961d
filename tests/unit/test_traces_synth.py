"""The synthetic generator: seeded, well-formed, and shaped like agent sessions."""

import itertools

import numpy as np
import pytest

from traces import read_sessions
from traces.native import write_native_file
from traces.synth import BLOCK_SIZE, COMPACTION_AT_TOKENS, PREFIX_TOKENS, generate


def sessions(n, seed):
    return list(generate(n, np.random.default_rng(seed)))


def test_same_seed_same_trace_other_seed_other_trace():
    a, b, c = sessions(5, 7), sessions(5, 7), sessions(5, 8)
    assert a == b
    assert a != c


def test_context_grows_and_falls_in_a_staircase_at_compaction():
    all_calls = [c for s in sessions(40, 1) for c in s.calls if not c.is_subagent]
    resets = [c for c in all_calls if c.reset_before]
    assert resets, "40 sessions should compact at least once"
    for call in resets:
        prev = all_calls[call_index(all_calls, call) - 1]
        assert call.input_tokens < prev.input_tokens
        assert call.cached_tokens < call.input_tokens  # only the system prefix survives
    grown = [
        b.input_tokens >= a.input_tokens
        for a, b in itertools.pairwise(all_calls)
        if a.session_id == b.session_id and not b.reset_before
    ]
    assert np.mean(grown) > 0.95  # turn by turn, with brief dips


def call_index(calls, call):
    return next(i for i, c in enumerate(calls) if c is call)


def test_normal_sessions_compact_before_the_window():
    for s in sessions(30, 3):
        main = [c for c in s.calls if not c.is_subagent]
        if main[0].input_tokens < COMPACTION_AT_TOKENS[0]:
            assert max(c.input_tokens for c in main) <= 200_000


def test_subagents_and_first_calls():
    generated = sessions(60, 2)
    assert any(s.subagent_calls for s in generated)
    for s in generated:
        assert s.calls[0].think_s == 0 and s.calls[0].cached_tokens == 0
        assert s.start_s is None


def canonical(session):
    """Block ids renamed by first appearance: what sharing a trace expresses."""
    names = {}
    return [tuple(names.setdefault(x, len(names)) for x in c.block_ids) for c in session.calls]


def fields(session):
    return [
        (c.input_tokens, c.cached_tokens, c.output_tokens, c.think_s, c.agent_id, c.reset_before)
        for c in session.calls
    ]


def test_native_round_trip_keeps_every_field_and_the_block_sharing(tmp_path):
    generated = sessions(6, 4)
    path = tmp_path / "synth.jsonl.gz"
    write_native_file(generated, path, gzip_out=True)
    back = list(read_sessions(path))
    assert [fields(s) for s in back] == [fields(s) for s in generated]
    assert [canonical(s) for s in back] == [canonical(s) for s in generated]


def test_gzip_output_is_the_same_bytes_whatever_its_name_and_time(tmp_path, monkeypatch):
    # Same seed, same file: the gzip header holds neither the (temporary) file's name
    # nor the time it was written.
    import gzip

    generated = sessions(2, 5)
    write_native_file(generated, tmp_path / "a.jsonl.gz", gzip_out=True)
    monkeypatch.setattr(gzip.time, "time", lambda: 2e9)  # another day
    write_native_file(generated, tmp_path / "b.jsonl.gz", gzip_out=True)
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_session_count_is_validated(bad):
    with pytest.raises(ValueError, match="n_sessions"):
        list(generate(bad, np.random.default_rng(0)))


def test_a_compaction_after_a_dip_into_the_prefix_keeps_the_block_count_right():
    """Session 122,043 of seed 0 (its generator state below): a dip kept fewer blocks than
    the prefix, and the compaction after it asked to keep the whole prefix; the call then
    had 22 block ids too few and `generate` raised RecordError (`trace synth --sessions
    200000` died with a traceback)."""
    rng = np.random.default_rng()
    rng.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": 197126007502393677169336383312202194850,
                  "inc": 87136372517582989555478159403783844777},
        "has_uint32": 0, "uinteger": 2637381026,
    }
    (session,) = generate(1, rng)
    assert any(c.reset_before for c in session.calls)
    for call in session.calls:
        assert len(call.block_ids) == call.input_tokens // call.block_size


def test_every_main_agent_call_resends_the_session_prefix():
    """The system-and-tools prefix (at least PREFIX_TOKENS[0] tokens) heads every call of
    the main agent, through dips and compactions: a dip that kept 75-98% of a short
    context once cut into it, and a later compaction then kept post-dip ids as the
    prefix (seed 0: sessions 240, 270, 406 and 457 of its first 500)."""
    prefix_blocks = PREFIX_TOKENS[0] // BLOCK_SIZE
    for session in generate(500, np.random.default_rng(0)):
        main = [c for c in session.calls if not c.is_subagent]
        head = main[0].block_ids[:prefix_blocks]
        for call in main[1:]:
            assert call.block_ids[:prefix_blocks] == head, (session.session_id, call.index)
