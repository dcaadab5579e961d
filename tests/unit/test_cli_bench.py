"""`tokenfactory bench`'s refusals: one line on stderr naming the option and the value,
exit status 2, nothing on stdout and nothing written; and a cluster file run as given."""

import json
import sys

import pytest

from tests.conftest import ROOT, run_cli

BASE = {"--model": "llama-3.1-70b", "--hardware": "h100", "--gpus": "8", "--isl": "1024",
        "--osl": "128", "--concurrency": "1,4", "--calls-per-user": "2", "--workers": "1"}


def argv(**changes):
    opts = {**BASE, **{f"--{k.replace('_', '-')}": v for k, v in changes.items()}}
    out = ["bench"]
    for key, value in opts.items():
        if value is not None:
            out += [key, value]
    return out


@pytest.mark.parametrize("changes, named", [
    ({"concurrency": "0"}, "--concurrency 0"),
    ({"concurrency": "4,0,8"}, "--concurrency 4,0,8"),
    ({"concurrency": "four"}, "--concurrency four"),
    ({"concurrency": "99999999999999999999"}, "expected integers in [1, 1,000,000]"),
    ({"isl": "200000"}, "--isl 200000: beyond llama-3.1-70b's context window of 131,072"),
    ({"isl": "131000", "osl": "1000"}, "--osl 1000: with --isl 131000"),
    ({"range_ratio": "0"}, "--range-ratio: expected a number in (0, 1], got '0'"),
    ({"range_ratio": "1.5"}, "--range-ratio: expected a number in (0, 1], got '1.5'"),
    ({"range_ratio": "-0.2"}, "--range-ratio: expected a number in (0, 1], got '-0.2'"),
    ({"engine": "tgi"}, "--engine: unknown engine 'tgi'"),
    ({"hardware": None}, "--hardware: required without --cluster"),
    ({"hardware": "h900"}, "--hardware h900"),
    ({"model": "no-such-model"}, "--model no-such-model"),
    ({"gpus": "0"}, "--gpus: expected a positive integer, got '0'"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(changes, named, tmp_path, capsys):
    out = tmp_path / "never"
    code, stdout, err = run_cli([*argv(**changes), "--out", str(out)], capsys)
    assert code == 2
    assert stdout == "" and err.count("\n") == 1 and named in err, err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_too_few_gpus_for_any_layout_is_refused_with_the_reason(tmp_path, capsys):
    code, stdout, err = run_cli(argv(model="deepseek-v3", gpus="1"), capsys)
    assert code == 2 and stdout == "" and err.count("\n") == 1
    assert "--gpus 1: no layout of deepseek-v3 runs on 1 h100 GPUs" in err


def test_a_cluster_file_runs_as_given_and_must_match_the_gpus_given(capsys):
    cluster = str(ROOT / "examples" / "clusters" / "hgx-h100-llama70b.toml")
    code, stdout, err = run_cli([*argv(hardware=None, gpus=None), "--cluster", cluster,
                                 "--json", "--engine", "sglang"], capsys)
    assert code == 0, err
    points = json.loads(stdout)["points"]
    assert [(p["layout"], p["concurrency"], p["family"], p["gpus"]) for p in points] == [
        ("hgx-h100-llama70b", 1, "aggregated", 8), ("hgx-h100-llama70b", 4, "aggregated", 8)]
    assert {p["engine"] for p in points} == {"sglang"}
    code, stdout, err = run_cli([*argv(hardware=None, gpus="16"), "--cluster", cluster],
                                capsys)
    assert code == 2 and stdout == "" and err.count("\n") == 1
    assert f"--gpus 16: --cluster {cluster} has 8 GPUs" in err


def test_the_progress_bar_counts_points_on_a_terminal():
    import io

    from rich.console import Console

    from orchestrator.bench.run import points_progress

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with points_progress(3, True, console=console) as advance:
        for _ in range(3):
            advance()
    text = out.getvalue()
    assert "bench" in text and "3/3" in text and "points" in text
    with points_progress(3, False) as advance:  # hidden: a no-op
        advance()


@pytest.mark.parametrize("extra, shown", [((), True), (("--json",), False),
                                           (("--no-progress",), False)])
def test_the_bar_is_off_with_json_or_no_progress(extra, shown, capsys, monkeypatch):
    import orchestrator.bench.run as bench_run

    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    asked = []
    real = bench_run.points_progress

    def spy(total, enabled, console=None):
        asked.append(enabled)
        return real(total, False)

    monkeypatch.setattr(bench_run, "points_progress", spy)
    cluster = str(ROOT / "examples" / "clusters" / "hgx-h100-llama70b.toml")
    code, _, err = run_cli([*argv(hardware=None, gpus=None, concurrency="1"), "--cluster",
                            cluster, *extra], capsys)
    assert code == 0, err
    show = sys.stderr.isatty() if asked[0] is None else asked[0]
    assert show is shown


@pytest.mark.slow  # two worker processes start (~3 s)
def test_points_on_the_process_pool_equal_points_run_here(capsys):
    cluster = str(ROOT / "examples" / "clusters" / "hgx-h100-llama70b.toml")
    runs = []
    for workers in ("1", "2"):
        code, stdout, err = run_cli([*argv(hardware=None, gpus=None, workers=workers,
                                           concurrency="1,2,4"), "--cluster", cluster,
                                     "--range-ratio", "0.5", "--json"], capsys)
        assert code == 0, err
        runs.append(json.loads(stdout))
    assert runs[0] == runs[1]


def test_a_failure_while_writing_leaves_no_directory(tmp_path, capsys, monkeypatch):
    import orchestrator.bench.output as output

    def broken(*_args, **_kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(output, "write_plot", broken)
    cluster = str(ROOT / "examples" / "clusters" / "hgx-h100-llama70b.toml")
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="disk full"):
        run_cli([*argv(hardware=None, gpus=None, concurrency="1"), "--cluster", cluster,
                 "--out", str(out)], capsys)
    assert list(tmp_path.iterdir()) == []  # neither --out nor its temporary directory


def test_the_table_printed_to_a_pipe_cuts_no_header():
    # Issue 35: into a file the table was squeezed to 80 columns ("outp…", "tok/s…").
    import io
    from contextlib import redirect_stdout

    from orchestrator.cli.bench import print_table

    point = {"layout": "agg 9x DEP8", "concurrency": 256, "gpus": 72, "interactivity": 55.6,
             "total_tokens_per_s_per_gpu": 369.0, "output_tokens_per_s_per_gpu": 196.0,
             "ttft_s": {"p50": 0.0515, "p99": 0.0692}, "itl_s": {"p50": 0.0176, "p99": 0.0342},
             "e2e_s": {"p50": 16.6}}
    out = io.StringIO()
    with redirect_stdout(out):
        print_table({"points": [point], "frontier": [point]}, "title",
                    type("Load", (), {"warmup_calls": 1})())
    text = out.getvalue()
    assert "…" not in text
    assert "output tok/s/GPU" in text and "agg 9x DEP8" in text
