"""Mooncake, Azure and native readers on small hand-made files."""

import json

import pytest

from tests.conftest import TRACE_DATA
from traces import TraceError, read_sessions
from traces.formats import Format, detect
from traces.mooncake import FOLLOW_UP_WINDOW_S


def mooncake(tmp_path, rows):
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def row(ms, n_in, ids, out=3):
    return {"timestamp": ms, "input_length": n_in, "output_length": out, "hash_ids": ids}


def test_mooncake_follow_ups_join_the_session_whose_whole_context_they_resend(tmp_path):
    path = mooncake(
        tmp_path,
        [
            row(0, 1100, [1, 2, 3]),  # session A: two full blocks + a partial one
            row(500, 600, [7, 8]),  # session B
            row(2000, 1600, [1, 2, 4, 5]),  # resends A's full blocks: A's second turn
            row(3000, 1100, [1, 2, 9]),  # shares A's prefix but not A's latest turn: new
        ],
    )
    sessions = list(read_sessions(path))
    assert [len(s.calls) for s in sessions] == [2, 1, 1]
    a = sessions[0]
    assert a.start_s == 0.0 and [c.arrival_s for c in a.calls] == [0.0, 2.0]
    assert [c.cached_tokens for c in a.calls] == [0, 1024]
    assert a.calls[1].think_s == 2.0 and a.calls[0].block_size == 512
    assert len(a.calls[1].block_ids) == 3  # full blocks only
    # One namespace per file: the shared system prefix is the same block everywhere.
    assert sessions[2].calls[0].block_ids[:2] == a.calls[0].block_ids[:2]
    assert [s.start_s for s in sessions] == sorted(s.start_s for s in sessions)


def test_mooncake_follow_up_window(tmp_path):
    late = int((FOLLOW_UP_WINDOW_S + 1) * 1000)
    path = mooncake(tmp_path, [row(0, 1024, [1, 2]), row(late, 1600, [1, 2, 3, 4])])
    assert [len(s.calls) for s in read_sessions(path)] == [1, 1]


def test_real_mooncake_trace_groups_into_sessions():
    sessions = list(read_sessions(TRACE_DATA / "mooncake" / "synthetic_trace.jsonl"))
    assert sum(len(s.calls) for s in sessions) == 3993
    assert len(sessions) == 2649
    assert all(s.start_s is not None for s in sessions)


def test_azure_rows_are_one_call_sessions_with_fresh_blocks(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
    )
    a, b = read_sessions(path)
    assert (a.start_s, b.start_s) == (0.0, pytest.approx(4.314579))
    assert a.calls[0].input_tokens == 374 and a.calls[0].cached_tokens == 0
    assert len(a.calls[0].block_ids) == 374 // 64
    assert not set(a.calls[0].block_ids) & set(b.calls[0].block_ids)


def test_azure_header_is_checked(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("time,in,out\n1,2,3\n")
    with pytest.raises(TraceError, match=r"a\.csv:1: header"):
        list(read_sessions(path, "azure"))


def native(tmp_path, *records, header=None):
    header = header or {"format": "tokenfactory-trace", "version": 1, "block_size": 64}
    path = tmp_path / "n.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [header, *records]))
    return path


def test_native_minimal_records_and_defaults(tmp_path):
    path = native(
        tmp_path,
        {"session": "a", "input_tokens": 100, "output_tokens": 5},
        {"session": "a", "input_tokens": 200, "output_tokens": 5, "think_s": 3},
        {"session": "b", "input_tokens": 10, "output_tokens": 1, "agent": "helper"},
    )
    a, b = read_sessions(path)
    assert [c.cached_tokens for c in a.calls] == [0, 0]  # no block ids: nothing shared
    assert a.calls[1].think_s == 3.0 and a.start_s is None
    assert b.calls[0].is_subagent and b.calls[0].agent_id == "helper"


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({"session": "a", "input_tokens": 100, "output_tokens": 5, "thinks": 1}, "thinks"),
        ({"session": "a", "input_tokens": 130, "output_tokens": 5, "block_ids": [1]}, "block_ids"),
        ({"session": "", "input_tokens": 1, "output_tokens": 5}, "session"),
        ({"session": "a", "input_tokens": 1, "output_tokens": 10_000_001}, "output_tokens"),
    ],
)
def test_native_bad_records_name_line_and_field(tmp_path, record, field):
    path = native(tmp_path, record)
    with pytest.raises(TraceError) as info:
        list(read_sessions(path))
    assert str(info.value).startswith(f"{path}:2: {field}: ")


def test_native_arrivals_must_not_go_back(tmp_path):
    path = native(
        tmp_path,
        {"session": "a", "input_tokens": 1, "output_tokens": 1, "arrival_s": 5},
        {"session": "a", "input_tokens": 1, "output_tokens": 1, "arrival_s": 4},
    )
    with pytest.raises(TraceError, match=r":3: arrival_s: 4\.0 goes back"):
        list(read_sessions(path))


def test_native_header_version_is_checked(tmp_path):
    path = native(tmp_path, header={"format": "tokenfactory-trace", "version": 2, "block_size": 64})
    with pytest.raises(TraceError, match=r":1: version: "):
        list(read_sessions(path))


def test_detection_of_every_bundled_format():
    traces = TRACE_DATA
    assert detect(traces / "weka-cc-dev" / "trace_0009.json.gz") is Format.WEKA
    assert detect(traces / "mooncake" / "synthetic_trace.jsonl") is Format.MOONCAKE
    assert detect(traces / "azure-2023" / "AzureLLMInferenceTrace_conv.csv") is Format.AZURE


def test_undetectable_file_asks_for_a_format(tmp_path):
    path = tmp_path / "x.json"
    path.write_text('{"something": 1}\n')
    with pytest.raises(TraceError, match="cannot tell the format; give --format"):
        list(read_sessions(path))
