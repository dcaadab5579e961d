"""`tokenfactory trace ...` as a user runs it: output, exit status, no half-written files."""

import gzip
import json

import pytest

from orchestrator.cli import main
from traces import sample_path

MOONCAKE = (
    '{"timestamp": 0, "input_length": 1024, "output_length": 5, "hash_ids": [1, 2]}\n'
    '{"timestamp": 1000, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3]}\n'
)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_stats_json_is_one_object_with_the_promised_keys(capsys):
    code, out, _ = run(capsys, "trace", "stats", "--json")
    assert code == 0
    obj = json.loads(out)
    assert out.count("\n") == 1
    for key in ("sessions", "calls", "subagent_calls", "resets"):
        assert isinstance(obj[key], int)
    for key in ("input_tokens", "cached_tokens", "new_tokens", "output_tokens", "think_s"):
        assert set(obj[key]) >= {"p50", "p90", "p99"}
    assert obj["sessions"] == len(list(sample_path().glob("*.json.gz")))


def test_stats_table_names_every_figure(capsys):
    code, out, _ = run(capsys, "trace", "stats", str(sample_path()))
    assert code == 0 and "prefix_hit" in out and "context resets" in out


def test_validate_accepts_the_sample(capsys):
    code, out, _ = run(capsys, "trace", "validate")
    assert code == 0 and out.startswith("ok: ")


def test_convert_then_read_gives_the_same_stats(capsys, tmp_path):
    src = tmp_path / "m.jsonl"
    src.write_text(MOONCAKE)
    out_file = tmp_path / "m.native.jsonl.gz"
    assert (
        run(capsys, "trace", "convert", str(src), "--to", "native", "--out", str(out_file))[0] == 0
    )
    with gzip.open(out_file) as f:
        assert f.readline().startswith(b'{"format":"tokenfactory-trace"')
    _, a, _ = run(capsys, "trace", "stats", "--json", str(src))
    _, b, _ = run(capsys, "trace", "stats", "--json", str(out_file))
    assert json.loads(a) == json.loads(b)
    assert json.loads(a)["sessions"] == 1


def _bad_inputs(tmp_path):
    good = json.dumps(
        {
            "id": "x",
            "block_size": 64,
            "requests": [{"t": 0, "type": "n", "in": 128, "out": 1, "hash_ids": [1, 2]}],
        }
    ).encode()
    cases = {
        "truncated.json.gz": (gzip.compress(good)[:-12], "gzip"),
        "invalid.jsonl": (b'{"timestamp": 0, "input_length": 1,\n', "1: json"),
        "missing.jsonl": (
            b'{"timestamp": 0, "output_length": 1, "hash_ids": [1]}\n',
            "1: input_length",
        ),
        "mistyped.jsonl": (
            MOONCAKE.replace('"output_length": 5', '"output_length": "5"', 1).encode(),
            "1: output_length",
        ),
        "negative.csv": (
            b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,-3,4\n",
            "2: ContextTokens",
        ),
        "absurd.jsonl": (MOONCAKE.replace("1100", "99000000", 1).encode(), "2: input_length"),
        "empty.json": (b"", "empty file"),
        "binary.json": (bytes(range(256)) * 4, "binary"),
    }
    return {name: (tmp_path / name, data, expect) for name, (data, expect) in cases.items()}


@pytest.mark.parametrize(
    "name",
    [
        "truncated.json.gz",
        "invalid.jsonl",
        "missing.jsonl",
        "mistyped.jsonl",
        "negative.csv",
        "absurd.jsonl",
        "empty.json",
        "binary.json",
    ],
)
def test_bad_input_is_one_located_line_exit_2_and_no_output_file(capsys, tmp_path, name):
    path, data, expect = _bad_inputs(tmp_path)[name]
    path.write_bytes(data)
    out_file = tmp_path / "out.jsonl"
    code, _, err = run(
        capsys, "trace", "convert", str(path), "--to", "native", "--out", str(out_file)
    )
    assert code == 2
    assert err.startswith(f"tokenfactory trace: error: {path}") and err.count("\n") == 1
    assert expect in err
    assert not out_file.exists()
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temporary left either


def test_timestamps_going_backwards_in_an_open_loop_trace(capsys, tmp_path):
    path = tmp_path / "back.jsonl"
    path.write_text(MOONCAKE.replace('"timestamp": 0', '"timestamp": 5000', 1))
    code, _, err = run(capsys, "trace", "stats", str(path))
    assert code == 2 and f"{path}:2: timestamp: 1000 ms goes back" in err


def test_directory_without_traces(capsys, tmp_path):
    (tmp_path / "notes.md").write_text("nothing here")
    code, _, err = run(capsys, "trace", "stats", str(tmp_path))
    assert code == 2 and "holds no trace files" in err and str(tmp_path) in err


def test_validate_refuses_a_trace_without_calls_as_replay_does(capsys, tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")  # an Azure header, no row
    code, out, err = run(capsys, "trace", "validate", str(path))
    assert code == 2 and out == ""
    assert err.strip() == f"{path}: sessions: none: the trace holds no call to replay"


def test_validate_lists_every_problem_up_to_20_then_a_count(capsys, tmp_path):
    path = tmp_path / "bad.jsonl"
    line = '{"timestamp": 0, "input_length": -1, "output_length": 1, "hash_ids": []}\n'
    path.write_text(line * 25)
    code, out, err = run(capsys, "trace", "validate", str(path))
    lines = err.splitlines()
    assert code == 2 and out == ""
    assert len(lines) == 21
    assert lines[0] == f"{path}:1: input_length: Expected `int` >= 0"
    assert lines[19].startswith(f"{path}:20: input_length:")
    assert lines[20] == "... and 5 more problems (25 in all)"


def test_unknown_format_name_is_refused(capsys):
    with pytest.raises(SystemExit) as info:
        main(["trace", "stats", "--format", "parquet"])
    assert info.value.code == 2


def test_synth_is_seeded_and_writes_a_readable_native_trace(capsys, tmp_path):
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    for out, seed in ((a, "3"), (b, "3"), (c, "4")):
        assert (
            run(capsys, "trace", "synth", "--sessions", "3", "--seed", seed, "--out", str(out))[0]
            == 0
        )
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    code, out, _ = run(capsys, "trace", "stats", "--json", str(a))
    assert code == 0 and json.loads(out)["sessions"] == 3


def test_synth_into_a_missing_directory_is_a_one_line_error(capsys, tmp_path):
    code, _, err = run(
        capsys,
        "trace",
        "synth",
        "--sessions",
        "2",
        "--seed",
        "1",
        "--out",
        str(tmp_path / "nope" / "x.jsonl"),
    )
    assert code == 2 and "does not exist" in err and err.count("\n") == 1


def test_a_session_whose_lines_are_not_contiguous_is_refused(capsys, tmp_path):
    """docs/trace-format.md: a session's lines are contiguous; a second run of them would
    otherwise become a second session of the same id."""
    path = tmp_path / "split.jsonl"
    call = '{{"session": "{}", "input_tokens": 5, "output_tokens": 4}}\n'
    path.write_text('{"format": "tokenfactory-trace", "version": 1, "block_size": 64}\n'
                    + call.format("s1") + "\n" + call.format("s2") + call.format("s1"))
    code, _, err = run(capsys, "trace", "stats", str(path))
    assert code == 2 and err.count("\n") == 1
    assert f"{path}:5: session: 's1' again after other sessions" in err
    assert "(it ended at line 2)" in err


@pytest.mark.parametrize("command", [["convert", str(sample_path()), "--to", "native"],
                                     ["synth", "--sessions", "2", "--seed", "1"]])
def test_an_out_that_is_a_directory_is_a_one_line_error(capsys, tmp_path, command):
    code, _, err = run(capsys, "trace", *command, "--out", str(tmp_path))
    assert code == 2 and err == f"tokenfactory trace: error: --out {tmp_path}: is a directory\n"
    assert list(tmp_path.iterdir()) == []


def test_an_azure_header_is_quoted_as_text(capsys, tmp_path):
    path = tmp_path / "short.csv"
    path.write_text("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,3\n")
    code, _, err = run(capsys, "trace", "stats", "--format", "azure", str(path))
    assert code == 2 and err.count("\n") == 1
    assert err.endswith(f"{path}:1: header: expected TIMESTAMP,ContextTokens,GeneratedTokens, "
                        "got 'TIMESTAMP,ContextTokens'\n")
