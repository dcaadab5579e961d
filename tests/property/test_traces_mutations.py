"""Readers fed mutated records either parse to valid records or raise TraceError."""

import gzip
import json
import os
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from traces import Call, Session, TraceError, read_sessions

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)

WEKA_REQUEST = {
    "t": 1.0,
    "type": "n",
    "in": 200,
    "out": 7,
    "hash_ids": [1, 2, 3],
    "think_time": 2.0,
    "api_time": 1.5,
}
MOONCAKE_ROW = {"timestamp": 10, "input_length": 1100, "output_length": 9, "hash_ids": [4, 5, 6]}
NATIVE_HEADER = {"format": "tokenfactory-trace", "version": 1, "block_size": 64}
NATIVE_CALL = {
    "session": "a",
    "input_tokens": 200,
    "output_tokens": 3,
    "think_s": 1.0,
    "block_ids": [1, 2, 3],
}


@st.composite
def mutated(draw, record):
    record = dict(record)
    action = draw(st.sampled_from(["set", "delete", "add", "keep"]))
    keys = sorted(record)
    if action == "set":
        record[draw(st.sampled_from(keys))] = draw(json_values)
    elif action == "delete":
        del record[draw(st.sampled_from(keys))]
    elif action == "add":
        record[draw(st.text(min_size=1, max_size=6))] = draw(json_values)
    return record


@st.composite
def damaged(draw, data: bytes):
    """Raw damage on top of a record: cut short or a byte changed."""
    kind = draw(st.sampled_from(["none", "truncate", "flip"]))
    if kind == "truncate":
        return data[: draw(st.integers(0, len(data)))]
    if kind == "flip" and data:
        i = draw(st.integers(0, len(data) - 1))
        return data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1 :]
    return data


def read_all(data: bytes, suffix: str, fmt: str, gz: bool = False):
    fd, name = tempfile.mkstemp(suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(gzip.compress(data) if gz else data)
        try:
            sessions = list(read_sessions(name, fmt))
        except TraceError as exc:
            assert str(exc).startswith(name)
            return None
        for s in sessions:
            assert isinstance(s, Session) and all(isinstance(c, Call) for c in s.calls)
        return sessions
    finally:
        os.unlink(name)


@settings(max_examples=80)
@given(first=mutated(WEKA_REQUEST), second=mutated(WEKA_REQUEST), gz=st.booleans(), data=st.data())
def test_weka_reader_never_fails_otherwise(first, second, gz, data):
    doc = {"id": "x", "block_size": 64, "requests": [first, {**second, "t": 3.0}]}
    raw = data.draw(damaged(json.dumps(doc).encode()))
    read_all(raw, ".json.gz" if gz else ".json", "weka", gz)


@settings(max_examples=80)
@given(rows=st.lists(mutated(MOONCAKE_ROW), min_size=1, max_size=3), data=st.data())
def test_mooncake_reader_never_fails_otherwise(rows, data):
    raw = data.draw(damaged("".join(json.dumps(r) + "\n" for r in rows).encode()))
    read_all(raw, ".jsonl", "mooncake")


@settings(max_examples=80)
@given(
    header=mutated(NATIVE_HEADER), calls=st.lists(mutated(NATIVE_CALL), max_size=3), data=st.data()
)
def test_native_reader_never_fails_otherwise(header, calls, data):
    raw = data.draw(damaged("".join(json.dumps(r) + "\n" for r in [header, *calls]).encode()))
    read_all(raw, ".jsonl", "native")


@settings(max_examples=80)
@given(
    cells=st.lists(st.text(max_size=12) | st.integers(-5, 2**40).map(str), min_size=1, max_size=4),
    data=st.data(),
)
def test_azure_reader_never_fails_otherwise(cells, data):
    raw = (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
        + ",".join(cells)
        + "\n"
    ).encode()
    read_all(data.draw(damaged(raw)), ".csv", "azure")


@settings(max_examples=100)
@given(rows=st.lists(mutated(MOONCAKE_ROW), min_size=1, max_size=3), data=st.data())
def test_auto_detection_never_fails_otherwise(rows, data):
    raw = data.draw(damaged("".join(json.dumps(r) + "\n" for r in rows).encode()))
    read_all(raw, ".jsonl", "auto")
