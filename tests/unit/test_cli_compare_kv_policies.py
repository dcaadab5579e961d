"""`tokenfactory compare --kv-policies offload,retain`: one trace, cluster and controller
under both KV placement policies, side by side; bad input is one line, exit 2."""

import json

import pytest

from orchestrator.cli import main
from orchestrator.run.openmetrics import open_text
from tests.conftest import run_cli
from tests.unit.test_cli_compare_clusters import DISAGG


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("kv")
    (d / "disagg.toml").write_text(DISAGG)
    assert main(["trace", "synth", "--sessions", "1", "--seed", "0",
                 "--out", str(d / "full.jsonl")]) == 0
    lines = (d / "full.jsonl").read_text().splitlines(keepends=True)
    (d / "tiny.jsonl").write_text("".join(lines[:7]))  # one session, six calls
    return d


@pytest.fixture
def no_plot(monkeypatch):
    import orchestrator.run.report

    monkeypatch.setattr(orchestrator.run.report, "plot_png", lambda results: b"")


def argv(d, *extra):
    return ["compare", str(d / "tiny.jsonl"), "--model", "llama-3.1-70b", "--no-progress",
            "--think-scale", "0.01", "--cluster", str(d / "disagg.toml"), *extra]


def test_both_policies_run_and_retain_moves_fewer_bytes(setup, capsys, no_plot):
    code, out, _ = run_cli(argv(setup, "--kv-policies", "offload,retain", "--json",
                                "--out", str(setup / "cmp")), capsys)
    assert code == 0
    runs = json.loads(out)["runs"]
    assert list(runs) == ["offload", "retain"]
    for name, s in runs.items():
        assert s["kv"]["policy"] == name
        assert s["requests"]["completed"] == 6
    assert (runs["retain"]["kv"]["bytes_moved"]["total"]
            < runs["offload"]["kv"]["bytes_moved"]["total"])
    assert runs["retain"]["cache"]["hit_tokens"]["hbm"] > runs["offload"]["cache"][
        "hit_tokens"]["hbm"]


def test_the_table_shows_the_kv_figures(setup, capsys, no_plot):
    code, out, _ = run_cli(argv(setup, "--kv-policies", "offload,retain", "--out",
                                       str(setup / "t")),
                           capsys)
    assert code == 0
    head = next(line for line in out.splitlines() if "figure" in line)
    assert "offload" in head and "retain" in head
    for row in ("prefix tokens from HBM", "KV copies per input token", "peak HBM per GPU"):
        assert row in out


@pytest.mark.parametrize(("extra", "message"), [
    (("--kv-policies", "retain"), "--kv-policies: expected two or more"),
    (("--kv-policies", "offload,keep"), "--kv-policies: unknown policy 'keep'"),
    (("--kv-policies", "retain,retain"), "names a policy twice"),
    (("--kv-policies", "offload,retain", "--controllers", "retire,buffered"),
     "--controllers: with --kv-policies, name one controller"),
    (("--kv-policy", "keep"), "--kv-policy: invalid choice: 'keep'"),
])
def test_bad_input_is_one_line_and_exit_2(setup, capsys, extra, message):
    out = setup / "never"
    code, stdout, err = run_cli(["compare", str(setup / "tiny.jsonl"), "--model",
                                 "llama-3.1-70b", "--no-progress", "--out", str(out), *extra],
                                capsys)
    assert code == 2 and stdout == ""
    assert message in err and "Traceback" not in err
    assert not out.exists()


def test_each_policy_is_a_run_of_its_own_in_the_metrics(setup, capsys, no_plot):
    # Both runs have one controller and seed: their `run` label must still differ, or
    # their series are one series in a Prometheus both are backfilled into.
    out = setup / "labels"
    code, _, _ = run_cli(argv(setup, "--kv-policies", "offload,retain", "--out", str(out)),
                         capsys)
    assert code == 0
    runs = {name: json.loads((out / f"{name}-summary.json").read_text())["run"]
            for name in ("offload", "retain")}
    assert runs == {"offload": "offload-buffered-seed0", "retain": "retain-buffered-seed0"}
    for name, run in runs.items():
        with open_text(out / f"{name}-metrics.om.gz") as f:
            text = f.read()
        assert f'run="{run}"' in text
        assert 'run="buffered-seed0"' not in text
