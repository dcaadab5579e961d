"""What the commands write and print does not surprise (issue 35, items 4 and 7): an
earlier output is replaced only with --overwrite, --metrics chooses what metrics.om
holds, --help says what a folder holds, files get the usual mode, figures read as
figures."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager

import pytest

from orchestrator.cli import build_parser
from orchestrator.run.openmetrics import open_text
from tests.conftest import TRACE_DATA, run_cli
from traces import sample_path


def _text(path) -> str:
    with open_text(path) as f:
        return f.read()

SMALL = ["--max-sessions", "2", "--think-scale", "0.01", "--no-progress"]


@contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def one_line_refusal(code: int, out: str, err: str) -> None:
    assert code == 2 and out == "" and err.count("\n") == 1, (code, err)


def test_replay_refuses_an_earlier_run_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli(["replay", *SMALL, "--json", "--out", str(out)], capsys)[0] == 0
    before = summary_without_wall_time(out)
    (out / "summary.json").write_text("{}")  # marks the earlier run's files
    code, stdout, err = run_cli(["replay", *SMALL, "--seed", "1", "--out", str(out)], capsys)
    one_line_refusal(code, stdout, err)
    assert "holds an earlier run; --overwrite replaces it" in err
    assert (out / "summary.json").read_text() == "{}"  # left as it was
    code, _, _ = run_cli(["replay", *SMALL, "--json", "--out", str(out), "--overwrite"], capsys)
    assert code == 0 and summary_without_wall_time(out) == before


def summary_without_wall_time(out) -> dict:
    summary = json.loads((out / "summary.json").read_text())
    del summary["sim"]["wall_s"]
    return summary


def test_an_empty_existing_folder_is_written_without_overwrite(tmp_path, capsys):
    out = tmp_path / "empty"
    out.mkdir()
    assert run_cli(["replay", *SMALL, "--json", "--out", str(out)], capsys)[0] == 0
    assert (out / "summary.json").exists()


def test_overwrite_never_replaces_a_folder_that_is_not_a_run(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    code, stdout, err = run_cli(["replay", *SMALL, "--out", str(out), "--overwrite"], capsys)
    one_line_refusal(code, stdout, err)
    assert "is not an earlier run" in err and (out / "notes.txt").read_text() == "keep me"


def test_compare_refuses_its_earlier_folder_before_running(tmp_path, capsys):
    out = tmp_path / "cmp"
    out.mkdir()
    (out / ".tokenfactory-run").write_text("")
    (out / "report.html").write_text("old")
    code, stdout, err = run_cli(["compare", *SMALL, "--out", str(out)], capsys)
    one_line_refusal(code, stdout, err)
    assert "--overwrite" in err and (out / "report.html").read_text() == "old"


def test_sweep_refuses_a_folder_with_files_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "sw"
    argv = ["sweep", "--phase", "decode", "--workload", "decode-8k", "--no-plots", "--json",
            "--out", str(out)]
    assert run_cli(argv, capsys)[0] == 0
    one_line_refusal(*run_cli(argv, capsys))
    assert run_cli([*argv, "--overwrite"], capsys)[0] == 0


@pytest.mark.parametrize("command", [
    ["trace", "convert", str(sample_path()), "--to", "native"],
    ["trace", "synth", "--sessions", "2", "--seed", "1"],
    ["plan", "--model", "kimi-k3-like", "--hardware", "gb200", "--gpus", "72",
     "--trace", str(sample_path())],
])
def test_file_outputs_refuse_an_existing_file_unless_overwrite(command, tmp_path, capsys):
    target = tmp_path / "out.file"
    target.write_text("earlier")
    code, _, err = run_cli([*command, "--out", str(target)], capsys)
    assert code == 2 and err.count("\n") == 1 and "exists; --overwrite replaces it" in err
    assert target.read_text() == "earlier"
    assert run_cli([*command, "--out", str(target), "--overwrite"], capsys)[0] == 0
    assert target.read_text() != "earlier"


@pytest.mark.parametrize("command", [
    ["trace", "convert", str(sample_path()), "--to", "native"],
    ["trace", "synth", "--sessions", "2", "--seed", "1"],
])
def test_written_files_have_the_mode_the_umask_gives(command, tmp_path, capsys):
    """mkstemp's private 0600 used to stay on the finished file."""
    with umask(0o022):
        assert run_cli([*command, "--out", str(tmp_path / "t.jsonl")], capsys)[0] == 0
    assert oct((tmp_path / "t.jsonl").stat().st_mode & 0o777) == "0o644"
    with umask(0o027):
        assert run_cli([*command, "--out", str(tmp_path / "u.jsonl")], capsys)[0] == 0
    assert oct((tmp_path / "u.jsonl").stat().st_mode & 0o777) == "0o640"


def test_metrics_none_writes_no_metrics_file(tmp_path, capsys):
    out = tmp_path / "run"
    assert run_cli(["replay", *SMALL, "--json", "--metrics", "none", "--out", str(out)],
                   capsys)[0] == 0
    assert sorted(p.name for p in out.iterdir()) == [".tokenfactory-run", "decisions.jsonl",
                                                     "series.csv", "summary.json"]


def test_metrics_run_leaves_out_per_pool_worker_and_link_series(tmp_path, capsys):
    full, coarse = tmp_path / "full", tmp_path / "run"
    at = ["--metrics-start", "1700000000"]  # the same wall-clock base for both files
    assert run_cli(["replay", *SMALL, *at, "--json", "--out", str(full)], capsys)[0] == 0
    assert run_cli(["replay", *SMALL, *at, "--json", "--metrics", "run", "--out", str(coarse)],
                   capsys)[0] == 0
    full_text = _text(full / "metrics.om.gz")
    run_text = _text(coarse / "metrics.om.gz")
    for label in (',pool="', ',worker="', ',link="'):
        assert label in full_text and label not in run_text
    assert "tokenfactory_request_ttft_seconds_bucket" in run_text
    assert len(run_text) < len(full_text)
    # What stays is the same, point for point.
    kept = [ln for ln in full_text.splitlines()
            if not any(x in ln for x in (',pool="', ',worker="', ',link="'))
            and not ln.startswith("#")]
    assert kept == [ln for ln in run_text.splitlines() if not ln.startswith("#")]


def test_replay_help_says_what_the_out_folder_holds(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["replay", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in ("summary.json", "series.csv", "decisions.jsonl", "metrics.om", "--overwrite",
                 "--metrics"):
        assert name in text


def test_demo_help_names_the_cluster_and_load_the_demo_uses(capsys):
    from orchestrator.run.demo import DEMO_CLUSTER, DEMO_POINT, DEMO_SEED

    with pytest.raises(SystemExit):
        build_parser().parse_args(["demo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"cluster preset or TOML file (default: {DEMO_CLUSTER})" in text
    assert "gb200-nvl72x2" not in text  # replay's default, which the demo does not use
    assert f"random seed (default {DEMO_SEED})" in text
    assert f"(default {DEMO_POINT.think_scale:g}; 0 removes them)" in text
    assert f"(default {DEMO_POINT.duration_s:g})" in text
    assert f"age of what controllers see (default {DEMO_POINT.observation_lag_s:g} s)" in text


def test_cost_prints_a_count_as_a_whole_number(capsys):
    code, out, _ = run_cli(["cost", "--model", "deepseek-v3", "--hardware", "h200", "--phase",
                            "decode", "--batch", "4", "--context", "8192", "--tp", "8", "--ep",
                            "8"], capsys)
    assert code == 0
    [row] = [line for line in out.splitlines() if "GPUs per instance" in line]
    assert row.split("│")[2].strip() == "8"
    assert "8.000" not in out


def test_plan_on_a_trace_without_think_time_prints_no_nan(capsys):
    argv = ["plan", "--model", "kimi-k3-like", "--hardware", "gb200", "--gpus", "72",
            "--trace", str(TRACE_DATA / "azure-2023")]
    code, out, _ = run_cli(argv, capsys)
    assert code == 0 and "nan" not in out
    assert "one call per session, so no calls per active session-hour" in out
    code, out, _ = run_cli([*argv, "--json"], capsys)
    assert code == 0 and json.loads(out)["trace"]["calls_per_session_hour"] is None
