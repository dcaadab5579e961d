"""The agent-session reader on small hand-made sessions and on the bundled sample."""

import gzip
import json

import pytest

from traces import TraceError, read_sessions, sample_path
from traces._blocks import LOCAL_BITS


def call(t, n_in, out=10, ids=None, think=None, api=1.0, kind="n"):
    req = {
        "t": t,
        "type": kind,
        "in": n_in,
        "out": out,
        "hash_ids": ids if ids is not None else list(range(1, n_in // 64 + 1)),
    }
    if think is not None:
        req["think_time"] = think
    if api is not None:
        req["api_time"] = api
    return req


def write(tmp_path, requests, name="s.json", gz=False, **top):
    doc = {
        "id": name.split(".")[0],
        "block_size": 64,
        "hash_id_scope": "local",
        "requests": requests,
        **top,
    }
    data = json.dumps(doc).encode()
    path = tmp_path / (name + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def only_session(path):
    sessions = list(read_sessions(path))
    assert len(sessions) == 1
    return sessions[0]


def test_cached_new_and_think_are_derived(tmp_path):
    path = write(
        tmp_path,
        [
            call(0.0, 640, ids=list(range(1, 11)), think=0.0),
            call(10.0, 700, ids=[*range(1, 11)], think=8.0),  # same blocks, a partial tail
            call(20.0, 960, ids=[*range(1, 11), 50, 51, 52, 53, 54], think=3.5),
        ],
        gz=True,
    )
    s = only_session(path)
    assert [c.cached_tokens for c in s.calls] == [0, 640, 640]
    assert [c.new_tokens for c in s.calls] == [640, 60, 320]
    assert [c.think_s for c in s.calls] == [0.0, 8.0, 3.5]
    assert s.start_s is None and all(c.arrival_s is None for c in s.calls)
    assert [c.index for c in s.calls] == [0, 1, 2]


def test_missing_think_time_is_the_gap_after_the_previous_answer(tmp_path):
    path = write(tmp_path, [call(0.0, 64, think=0.0, api=2.5), call(10.0, 128, api=1.0)])
    assert only_session(path).calls[1].think_s == pytest.approx(7.5)


def test_cached_counts_blocks_seen_anywhere_earlier_in_the_session(tmp_path):
    # After a reset back to the prefix, blocks computed two turns ago still count.
    path = write(
        tmp_path,
        [
            call(0, 64 * 4, ids=[1, 2, 3, 4]),
            call(1, 64 * 6, ids=[1, 2, 3, 4, 5, 6]),
            call(2, 64 * 2, ids=[1, 2]),
            call(3, 64 * 5, ids=[1, 2, 3, 4, 9]),
        ],
    )
    s = only_session(path)
    assert [c.cached_tokens // 64 for c in s.calls] == [0, 4, 2, 4]
    assert [c.reset_before for c in s.calls] == [False, False, True, False]


def test_subagents_are_flattened_inline_with_their_own_agent_id(tmp_path):
    sub = {
        "t": 5.0,
        "type": "subagent",
        "agent_id": "agent_001",
        "requests": [
            call(0.0, 128, ids=[100, 101], think=0.0),
            call(2.0, 192, ids=[100, 101, 102], think=1.0),
        ],
    }
    path = write(
        tmp_path, [call(0.0, 128, ids=[1, 2]), sub, call(9.0, 192, ids=[1, 2, 3], think=4.0)]
    )
    s = only_session(path)
    assert [c.is_subagent for c in s.calls] == [False, True, True, False]
    assert [c.agent_id for c in s.calls] == ["main", "agent_001", "agent_001", "main"]
    assert [c.cached_tokens for c in s.calls] == [0, 0, 128, 128]
    assert s.subagent_calls == 2 and s.resets == 0


def test_block_ids_are_namespaced_per_file(tmp_path):
    a = write(tmp_path, [call(0, 128, ids=[1, 2])], name="a.json")
    b = write(tmp_path, [call(0, 128, ids=[1, 2])], name="b.json")
    sa, sb = read_sessions([a, b])
    assert not set(sa.calls[0].block_ids) & set(sb.calls[0].block_ids)
    assert [x & ((1 << LOCAL_BITS) - 1) for x in sa.calls[0].block_ids] == [1, 2]


def test_timestamps_going_backwards_are_refused(tmp_path):
    path = write(tmp_path, [call(10.0, 64), call(5.0, 64)])
    with pytest.raises(TraceError, match=r"s\.json:requests\[1\]: t: 5\.0 s goes back"):
        list(read_sessions(path))


@pytest.mark.parametrize(
    ("mutation", "field"),
    [
        ({"in": "many"}, "in"),
        ({"in": -5}, "in"),
        ({"out": 20_000_000}, "out"),
        ({"hash_ids": [1, 2, 3]}, "hash_ids"),
        ({"type": "x"}, "type"),
        ({"think_time": -1}, "think_time"),
    ],
)
def test_bad_fields_name_the_record_and_field(tmp_path, mutation, field):
    bad = {**call(1.0, 128, ids=[1, 2]), **mutation}
    path = write(tmp_path, [call(0.0, 64), bad])
    with pytest.raises(TraceError) as info:
        list(read_sessions(path))
    assert str(info.value).startswith(f"{path}:requests[1]: {field}: ")


def test_missing_field_is_named(tmp_path):
    bad = call(1.0, 128, ids=[1, 2])
    del bad["in"]
    path = write(tmp_path, [bad])
    with pytest.raises(TraceError, match=r"requests\[0\]: in: Object missing required field"):
        list(read_sessions(path))


def test_bundled_sample_reads_with_subagents_and_resets():
    sessions = list(read_sessions(sample_path()))
    assert 8 <= len(sessions) <= 20
    assert sum(s.subagent_calls for s in sessions) > 0
    assert sum(s.resets for s in sessions) > 0
    size = sum(p.stat().st_size for p in sample_path().iterdir())
    assert size < 1_000_000
    assert (sample_path() / "LICENSE").is_file() and (sample_path() / "SOURCE.md").is_file()
