"""What a retiring call writes depends on the call alone, never on the trace's future."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.run.sessions import make_request, writeback_blocks
from storage.blobs import KnownIds
from traces._blocks import output_block_ids
from traces.model import Call

BS = 16


def _call(blocks, output_tokens, extra_input=0, index=0):
    input_tokens = len(blocks) * BS + extra_input
    return Call(session_id="s", index=index, input_tokens=input_tokens, cached_tokens=0,
                new_tokens=input_tokens, output_tokens=output_tokens, think_s=0.0,
                is_subagent=False, reset_before=False, block_size=BS,
                block_ids=tuple(blocks))


def test_the_next_call_names_the_output_it_resends():
    call = _call(range(10), output_tokens=3 * BS)
    following = _call(range(20), output_tokens=1, index=1)
    assert writeback_blocks(call, following, 7) == tuple(range(13))


def test_without_a_next_call_the_output_is_written_under_ids_of_its_own():
    call = _call(range(10), output_tokens=3 * BS + 5)
    written = writeback_blocks(call, None, 7)
    assert written[:10] == tuple(range(10))
    assert len(written) == 13
    assert all(i < 0 for i in written[10:])


def test_a_next_call_that_does_not_resend_the_input_names_nothing():
    call = _call(range(10), output_tokens=3 * BS)
    compacted = _call([0, 1, 500, 501, 502, 503, 504, 505, 506, 507, 508, 509, 510, 511],
                      output_tokens=1, index=1)
    written = writeback_blocks(call, compacted, 7)
    assert written == writeback_blocks(call, None, 7)
    assert not set(written[10:]) & set(compacted.block_ids)


def test_a_next_call_shorter_than_the_answer_names_what_it_resends():
    call = _call(range(10), output_tokens=4 * BS)
    following = _call(range(12), output_tokens=1, index=1)
    written = writeback_blocks(call, following, 7)
    assert written[:12] == tuple(range(12))
    assert len(written) == 14 and all(i < 0 for i in written[12:])


def test_an_answer_under_one_block_beyond_the_input_writes_the_input():
    call = _call(range(10), output_tokens=BS - 1)
    assert writeback_blocks(call, None, 7) == call.block_ids
    # The partial block the input ends with counts with the answer.
    call = _call(range(10), output_tokens=BS - 1, extra_input=1)
    assert len(writeback_blocks(call, None, 7)) == 11


def test_own_ids_start_with_one_of_the_call_and_never_meet_a_trace_id():
    call = _call(range(10), output_tokens=5 * BS)
    a = writeback_blocks(call, None, 1)[10:]
    b = writeback_blocks(call, None, 2)[10:]
    assert len(a) == len(b) == 5
    assert len(set(a)) == 5  # one id per position
    # The first differs (a blob of them is the call's alone: the store keys a blob on
    # its chain and its first block); the rest are shared int objects.
    assert a[0] != b[0]
    assert a[1:] == b[1:] and all(x is y for x, y in zip(a[1:], b[1:], strict=True))
    assert max(a + b) < 0


def test_the_shared_ids_grow_with_the_longest_context():
    assert output_block_ids(3, 0, 1) == (-(3 << 32) - 1,)
    ids = output_block_ids(3, 100_000, 100_004)
    assert ids == (-(3 << 32) - 100_001, -100_002, -100_003, -100_004)


@given(n=st.integers(0, 40), output=st.integers(0, 40 * BS), shared=st.integers(0, 60),
       tail=st.integers(0, 60), call_id=st.integers(0, 2**40))
def test_how_much_is_written_never_depends_on_the_next_call(n, output, shared, tail,
                                                            call_id):
    call = _call(range(n), output_tokens=output)
    following = _call(list(range(min(shared, n))) + list(range(1000, 1000 + tail)),
                      output_tokens=1, index=1)
    alone = writeback_blocks(call, None, call_id)
    written = writeback_blocks(call, following, call_id)
    assert len(written) == len(alone) == max(n, (n * BS + output) // BS)
    assert written[:n] == alone[:n] == call.block_ids
    # What they say of themselves is true (the store's index takes their word for it).
    for ids in (alone, written):
        if type(ids) is KnownIds:
            assert ids.starts_with is call.block_ids
            assert ids[:n] == call.block_ids
            if ids.prefix_of is not None:
                assert ids.prefix_of is following.block_ids
                assert following.block_ids[:len(ids)] == ids
        else:  # (the input itself, or a session's last call: nothing known said)
            assert ids is call.block_ids or ids is alone
    assert type(alone) is not KnownIds


def test_they_say_what_they_start_with_and_what_they_begin():
    call = _call(range(10), output_tokens=3 * BS)
    following = _call(range(20), output_tokens=1, index=1)
    written = writeback_blocks(call, following, 7)
    assert type(written) is KnownIds and written == tuple(range(13))
    assert written.starts_with is call.block_ids and written.prefix_of is following.block_ids
    # Past the next call's input they begin nothing known; a session's last call says
    # nothing (open-loop traffic: short inputs, compared as cheaply as known).
    short = _call(range(12), output_tokens=1, index=1)
    assert writeback_blocks(call, short, 7).prefix_of is None
    assert writeback_blocks(call, short, 7).starts_with is call.block_ids
    assert type(writeback_blocks(call, None, 7)) is tuple


def test_the_request_carries_them():
    call = _call(range(4), output_tokens=2 * BS)
    req = make_request(3, call, None)
    assert req.writeback_block_ids == writeback_blocks(call, None, 3)
    assert req.block_ids == call.block_ids
