"""`tokenfactory compare --clusters`: one trace and controller on an aggregated and a
disaggregated cluster of the same GPUs, side by side; bad input is one line, exit 2."""

import json

import pytest

from orchestrator.cli import main
from tests.conftest import run_cli

NODES = """
[pfs]
capacity_gb = 100_000
read_gb_per_s = 200
write_gb_per_s = 100

[[racks]]
name = "r0"

[[nodes]]
name = "n0"
rack = "r0"
hardware = "h200"
gpus = 8
dram_gb = 2000
dram_gb_per_s = 200

[[nodes]]
name = "n1"
rack = "r0"
hardware = "h200"
gpus = 8
dram_gb = 2000
dram_gb_per_s = 200
"""
AGG = 'name = "agg"\n' + NODES + """
[[pools]]
name = "mixed"
phase = "mixed"
nodes = ["n0", "n1"]
gpus = 16
tp = 4
precision = "bf16"
target_batch = 8
max_batch_sequences = 8
max_batch_tokens = 8192
"""
DISAGG = 'name = "disagg"\n' + NODES + """
[[pools]]
name = "prefill"
phase = "prefill"
nodes = ["n0"]
gpus = 8
tp = 4
precision = "bf16"

[[pools]]
name = "decode"
phase = "decode"
nodes = ["n1"]
gpus = 8
tp = 4
precision = "bf16"
target_batch = 4
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("clusters")
    (d / "agg.toml").write_text(AGG)
    (d / "disagg.toml").write_text(DISAGG)
    assert main(["trace", "synth", "--sessions", "1", "--seed", "0",
                 "--out", str(d / "full.jsonl")]) == 0
    lines = (d / "full.jsonl").read_text().splitlines(keepends=True)
    (d / "tiny.jsonl").write_text("".join(lines[:7]))  # one session, six calls
    return d


@pytest.fixture
def no_plot(monkeypatch):
    """The report's plot (matplotlib, ~1 s) is not what these tests look at."""
    import orchestrator.run.report

    monkeypatch.setattr(orchestrator.run.report, "plot_png", lambda results: b"")


run = run_cli


def argv(d, *extra):
    return ["compare", str(d / "tiny.jsonl"), "--model", "llama-3.1-70b", "--no-progress",
            "--think-scale", "0.01",
            "--clusters", f"{d / 'agg.toml'},{d / 'disagg.toml'}", *extra]


def test_json_gives_one_object_with_both_runs_completing_every_call(setup, capsys, no_plot):
    code, out, _ = run(argv(setup, "--json", "--out", str(setup / "cmp")), capsys)
    assert code == 0
    runs = json.loads(out)["runs"]
    assert list(runs) == ["agg", "disagg"]
    for s in runs.values():
        assert s["requests"]["completed"] == s["requests"]["submitted"] == 6
        assert s["resources"]["gpus"] == 16
    assert runs["agg"]["resources"]["kv_bytes_moved"] < runs["disagg"]["resources"][
        "kv_bytes_moved"]  # no fill -> decode hand-over
    written = json.loads((setup / "cmp" / "compare.json").read_text())
    assert list(written["runs"]) == ["agg", "disagg"]
    assert (setup / "cmp" / "agg-summary.json").is_file()


def test_the_table_prints_both_clusters_side_by_side(setup, capsys, no_plot):
    code, out, _ = run(argv(setup, "--controllers", "retire", "--out", str(setup / "t")),
                       capsys)
    assert code == 0
    head = next(line for line in out.splitlines() if "figure" in line)
    assert "agg" in head and "disagg" in head
    for row in ("goodput tokens/s", "TTFT p50 / p99", "ITL p50 / p99", "output tokens/s per GPU",
                "energy per call"):
        assert row in out


@pytest.mark.parametrize(("extra", "message"), [
    (("--clusters", "agg.toml"), "--clusters: expected two or more"),
    (("--clusters", "{d}/agg.toml,{d}/missing.toml"), "--clusters: "),
    (("--clusters", "{d}/agg.toml,{d}/bad.toml"), "bad.toml:{line}: pools[0].phase: expected prefill"),
    (("--clusters", "{d}/agg.toml,{d}/agg.toml"), "names a cluster twice"),
    (("--clusters", "{d}/agg.toml,{d}/disagg.toml", "--controllers", "retire,buffered"),
     "--controllers: with --clusters, name one controller"),
])
def test_bad_input_is_one_line_and_exit_2(setup, capsys, extra, message):
    (setup / "bad.toml").write_text(AGG.replace('phase = "mixed"', 'phase = "both"'))
    extra = [e.format(d=setup) for e in extra]
    # The error names the line where the bad field is written.
    message = message.format(line=AGG.splitlines().index('phase = "mixed"') + 1)
    out = setup / "never"
    code, stdout, err = run(["compare", str(setup / "tiny.jsonl"), "--model", "llama-3.1-70b",
                             "--no-progress", "--out", str(out), *extra], capsys)
    assert code == 2 and stdout == ""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert not out.exists()
