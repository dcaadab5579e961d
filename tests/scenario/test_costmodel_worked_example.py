"""The worked example end to end: the sweep, its frontiers and the essay's checks."""

import json

import numpy as np
import pytest

from costmodel.phase import Phase
from costmodel.worked_example import (
    WORKLOADS,
    check_findings,
    print_worked_example,
    run_worked_example,
    summary_rows,
)
from orchestrator.cli import main


@pytest.fixture(scope="module")
def result():
    return run_worked_example()


def test_every_workload_and_gpu_has_a_frontier(result):
    rows = summary_rows(result)
    assert len(rows) == len(WORKLOADS) * 3
    assert all(r["frontier_points"] >= 3 for r in rows)


def test_share_of_frontier_points_under_80gb(result):
    # The essay: "most frontier points under 80 GB". Our model does not reproduce it:
    # resident HBM per GPU (weights + KV for pp micro-batches in flight + buffers)
    # puts about a fifth of the frontier under the line. Asserted as measured, so a
    # change to the memory model that moves it shows up here.
    c = result.columns
    front = c["on_frontier"]
    share = float(np.mean(c["hbm_bytes_per_gpu"][front] < 80e9))
    assert 0.10 < share < 0.50
    finding = {f.claim: f for f in check_findings(result)}
    assert finding["most frontier points under 80 GB HBM per GPU"].holds is False


def test_findings_recorded_as_the_model_says(result):
    held = {f.claim: f.holds for f in check_findings(result)}
    assert len(held) == 7
    # Pinned only where the model's margin is wide (9 of 9 and 0 of 6 frontiers);
    # the others are reported by `tokenfactory sweep` and docs/sweeps.md.
    assert held["decode: lowest latency uses PP+TP"] is True
    assert held["prefill: best tok/s/GPU at PP=4 with TP 4 or 2"] is False


def test_frontier_points_fit_and_decode_is_slowest_per_token(result):
    c = result.columns
    assert np.all(c["fits"][c["on_frontier"]])
    decode = c["on_frontier"] & (c["phase"] == Phase.DECODE)
    fill = c["on_frontier"] & (c["phase"] != Phase.DECODE)
    # Per GPU, decode makes fewer tokens per second than any fill frontier does at best.
    assert c["tokens_per_s_per_gpu"][decode].max() < c["tokens_per_s_per_gpu"][fill].max()


def test_print_worked_example_runs(result):
    from rich.console import Console

    console = Console(record=True, width=160)
    print_worked_example(console, result=result)
    text = console.export_text()
    assert "decode-128k" in text and "gb200" in text and "80 GB" in text


def test_cli_sweep_writes_tables(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", "--phase", "decode", "--workload", "decode-8k", "--no-plots",
                 "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["workloads"] == ["decode-8k"]
    assert sorted(p.name for p in out.iterdir()) == ["frontier.csv", "sweep.csv"]
    lines = (out / "frontier.csv").read_text().splitlines()
    assert len(lines) == report["frontier_rows"] + 1
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temp dir left behind


@pytest.mark.slow
def test_cli_sweep_default_writes_plots(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["sweep"]) == 0
    names = sorted(p.name for p in (tmp_path / "sweep-out").iterdir())
    assert "sweep.csv" in names and len([n for n in names if n.endswith(".png")]) == 4
    assert "configurations swept" in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [
    (["--executor", "ray", "--ray-address", "127.0.0.1:1"], "cannot reach"),
    (["--hardware", "gb200,nope"], "known: "),
    (["--hardware", "gb200,,b200"], "--hardware: empty item in 'gb200,,b200'"),
    (["--hardware", ""], "--hardware: expected a comma-separated list, got ''"),
    (["--model", "nope"], "known: "),
    (["--workload", "nope"], "known: "),
    (["--phase", "prefill", "--workload", "decode-8k"], "no workload"),
])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, words):
    assert main(["sweep", "--out", str(tmp_path / "o"), *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and words in captured.err
    assert not (tmp_path / "o").exists()


def test_cli_unwritable_out_is_one_line_exit_2(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for out in (blocker, blocker / "sub", tmp_path / "missing" / "sub"):
        assert main(["sweep", "--no-plots", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--out" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
