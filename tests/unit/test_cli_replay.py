"""replay / compare from the command line: output, and one-line errors with exit 2."""

import csv
import json

import pytest

from tests.conftest import run_cli

SMALL = ["--max-sessions", "2", "--think-scale", "0.01", "--no-progress"]


run = run_cli


def refused(argv, out, capsys, message):
    """`argv --out out` is refused: one line holding `message`, exit 2, no `out`."""
    code, stdout, err = run([*argv, "--out", str(out)], capsys)
    assert code == 2 and stdout == "" and err.count("\n") == 1, err
    assert message in err
    assert not out.exists()


def test_replay_json_has_the_contract_keys_and_writes_its_directory(tmp_path, capsys):
    out = tmp_path / "run"
    code, stdout, _ = run(["replay", *SMALL, "--json", "--out", str(out)], capsys)
    assert code == 0
    s = json.loads(stdout)
    for section, key in [("requests", "submitted"), ("requests", "completed"),
                         ("requests", "lost"), ("requests", "rejected"), ("ttft_s", "p99"),
                         ("tpot_s", "p50"), ("throughput", "output_tokens_per_s"),
                         ("throughput", "output_tokens_per_s_per_gpu"),
                         ("goodput", "output_tokens_per_s"), ("control", "oscillation_index"),
                         ("control", "decode_starvation_fraction"),
                         ("control", "reconfigurations"), ("resources", "peak_hbm_bytes_per_gpu"),
                         ("resources", "kv_bytes_moved"), ("energy", "joules_per_call"),
                         ("sim", "simulated_s"), ("sim", "wall_s"), ("sim", "events")]:
        assert key in s[section]
    assert s["requests"]["lost"] == 0
    assert json.loads((out / "summary.json").read_text())["requests"] == s["requests"]
    with (out / "series.csv").open(newline="") as f:
        columns, *rows = list(csv.reader(f))
    assert columns[0] == "time_s" and "transfer_p99_s" in columns and "decode_p50_s" in columns
    assert rows and all(len(r) == len(columns) for r in rows)
    first = json.loads((out / "decisions.jsonl").read_text().splitlines()[0])
    assert first["event"] == "admission" and "reason" in first


def test_help_states_the_defaults(capsys):
    code, stdout, _ = run(["replay", "--help"], capsys)
    assert code == 0
    text = " ".join(stdout.split())
    assert "(default: kimi-k3-like)" in text and "(default: gb200-nvl72x2)" in text
    assert "(default: buffered)" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--controller", "pid"], "unknown controller 'pid'; known: admit-all, binding, buffered, local, predictive, retire"),
        (["--cluster", "nope"], "unknown cluster 'nope'; known: b200x8"),
        (["--model", "gpt-9"], "unknown model 'gpt-9'"),
        (["--fast-period", "10"], "control configuration refused: the fast loop (10 s)"),
        (["--speed", "0"], "argument --speed: expected a positive number, got '0'"),
        (["--sessions-per-hour", "x"], "argument --sessions-per-hour"),
    ],
)
def test_bad_options_are_one_line_exit_2(capsys, argv, message):
    code, stdout, err = run(["replay", *SMALL, *argv], capsys)
    assert code == 2 and stdout == ""
    assert err.count("\n") == 1 and message in err


def test_bad_cluster_file_names_the_field(tmp_path, capsys):
    bad = tmp_path / "c.toml"
    bad.write_text('name = "c"\n[pfs]\ncapacity_gb = -1\nread_gb_per_s = 1\nwrite_gb_per_s = 1\n'
                   '[[racks]]\nname = "r"\n[[nodes]]\nname = "n"\nrack = "r"\nhardware = "h100"\n'
                   'gpus = 8\ndram_gb = 1\ndram_gb_per_s = 1\n')
    code, _, err = run(["replay", *SMALL, "--cluster", str(bad)], capsys)
    assert code == 2 and "pfs.capacity_gb: expected > 0, got -1" in err


def test_a_cluster_the_model_does_not_fit_names_the_file_and_model(tmp_path, capsys):
    """The pool's refusal comes from binding the cluster to the model: the line names
    the cluster file and the model as well as the pool."""
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples/clusters/hgx-h100-llama70b.toml"
    bad = tmp_path / "small.toml"
    bad.write_text(example.read_text())  # one H100 node: too small for this model
    model = ["--model", "kimi-k3-like"]
    for argv, prefix in (
            (["replay", "--cluster", str(bad)], f"{bad} with model kimi-k3-like: pool mixed: "),
            (["compare", "--clusters", f"gb200-nvl72x2,{bad}"],
             f"--clusters: {bad} with model kimi-k3-like: pool mixed: ")):
        code, _, err = run([*argv, *SMALL, *model], capsys)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and prefix in lines[0], err
        assert "the model slice does not fit" in lines[0]


def test_trace_errors_surface_as_the_readers_message(tmp_path, capsys):
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": -5, "output_length": 3, "hash_ids": []}\n')
    code, _, err = run(["replay", *SMALL, str(bad)], capsys)
    assert code == 2 and "t.jsonl:1" in err and err.count("\n") == 1


def test_out_that_is_not_ours_is_refused_and_left_alone(tmp_path, capsys):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "precious.txt").write_text("keep")
    code, _, err = run(["replay", *SMALL, "--out", str(out)], capsys)
    assert code == 2 and "exists, is not empty and is not an earlier run" in err
    assert [p.name for p in out.iterdir()] == ["precious.txt"]


def test_failed_run_leaves_no_directory(tmp_path, capsys):
    out = tmp_path / "never"
    code, _, _ = run(["replay", *SMALL, "--controller", "pid", "--out", str(out)], capsys)
    assert code == 2 and not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == []


def test_compare_refuses_unknown_controllers(capsys):
    code, _, err = run(["compare", "--controllers", "retire,foo", *SMALL], capsys)
    assert code == 2 and "--controllers: unknown controller 'foo'" in err


def test_window_throughput_counts_only_calls_done_inside_the_window():
    from orchestrator.run.settings import RunSettings, prepare, run_replay
    from orchestrator.run.summary import window_bounds_s, window_throughput
    from traces import sample_path
    from traces.replay import LoadOptions

    settings = RunSettings(load=LoadOptions(max_sessions=4, think_scale=0.01), seed=3)
    result = run_replay(prepare([sample_path()], "auto", settings), settings)[0]
    lo, hi = window_bounds_s(result)
    inside = [r for r in result.requests if r.done_s is not None and lo <= r.done_s <= hi]
    outside = [r for r in result.requests if r.done_s is not None and not lo <= r.done_s <= hi]
    assert inside and outside  # the ramp-up and drain leave calls out
    w = window_throughput(result)
    assert w["output_tokens_per_s"] == sum(r.output_tokens for r in inside) / (hi - lo)
    assert w["output_tokens_per_s_per_gpu"] == w["output_tokens_per_s"] / result.gpus


@pytest.mark.parametrize("value", ["nan", "inf", "1e300", "-1e20"])
def test_a_metrics_start_no_date_can_name_is_refused(value, tmp_path, capsys):
    """metrics.om stamps every reading from --metrics-start: `nan` used to write `nan`
    timestamps into a file Prometheus cannot read."""
    refused(["replay", *SMALL, f"--metrics-start={value}"], tmp_path / "run", capsys,
            f"--metrics-start: expected Unix seconds of a date in years 1-9999, got '{value}'")


@pytest.mark.parametrize("value", ["", ","])
def test_compare_with_an_empty_controller_list_is_refused(value, tmp_path, capsys):
    """`--controllers ""` used to run the default controllers, exit 0."""
    refused(["compare", *SMALL, f"--controllers={value}"], tmp_path / "cmp", capsys,
            f"--controllers: expected a comma-separated list, got {value!r}")


@pytest.mark.parametrize("option, value", [
    ("--controllers", "retire,,buffered"), ("--controllers", "retire,"),
    ("--clusters", "gb200-nvl72x1,,gb200-nvl72x2"), ("--kv-policies", "offload,retain,")])
def test_compare_lists_with_an_empty_item_are_refused(option, value, tmp_path, capsys):
    """An empty item in a comma-separated list used to be skipped silently."""
    refused(["compare", *SMALL, f"{option}={value}"], tmp_path / "cmp", capsys,
            f"{option}: empty item in {value!r}")
