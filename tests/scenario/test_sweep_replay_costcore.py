"""`tokenfactory sweep --executor`: split by workload over workers, the same files."""

from __future__ import annotations

import pytest

from costmodel.sweep import merge_results
from costmodel.worked_example import GRID, WORKLOADS, run_worked_example, sweep_part
from orchestrator.cli import main
from orchestrator.executors import InlineExecutor, map_ordered

ARGS = ["--hardware", "gb200,b200", "--workload", "decode-8k", "--workload", "prefill-8k",
        "--workload", "midfill-31k+1k", "--no-plots"]


def test_a_sweep_split_by_workload_merges_to_the_same_result():
    whole = run_worked_example(hardware=("gb200", "b200"))
    with InlineExecutor() as ex:
        split = run_worked_example(hardware=("gb200", "b200"),
                                   map_parts=lambda fn, s, items: map_ordered(ex, fn, s, items))
    assert split.workloads == WORKLOADS and split.configs_evaluated == whole.configs_evaluated
    assert whole.columns.keys() == split.columns.keys()
    for key, values in whole.columns.items():
        assert (values == split.columns[key]).all(), key
    one = sweep_part(("kimi-k3-like", ("gb200",), GRID),
                     WORKLOADS[:1])
    assert merge_results([one]).workloads == WORKLOADS[:1]


def _files(out):
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


@pytest.mark.slow
@pytest.mark.parametrize("executor", [["local", "--workers", "2"], ["ray"]])
def test_cli_executors_write_the_same_files(tmp_path, capsys, executor):
    if executor[0] == "ray":
        pytest.importorskip("ray")
    assert main(["sweep", *ARGS, "--out", str(tmp_path / "one")]) == 0
    assert main(["sweep", *ARGS, "--out", str(tmp_path / "two"), "--executor", *executor]) == 0
    assert _files(tmp_path / "one") == _files(tmp_path / "two")


def test_cli_unreachable_ray_is_one_line(tmp_path, capsys):
    assert main(["sweep", *ARGS, "--out", str(tmp_path / "o"), "--executor", "ray",
                 "--ray-address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach" in err
    assert not (tmp_path / "o").exists()
