"""`--mtp N` on the replaying commands: every decode pool, before the cluster is bound."""

import pytest

from orchestrator.cli import build_parser, main
from orchestrator.cli._replay_opts import settings_from_args, trace_paths
from orchestrator.cli._replay_run import prepare_or_fail

# DeepSeek-V3 FP8 on two H200 nodes; the decode pool leaves `mtp` unset.
CLUSTER = """
name = "two-h200-nodes"
[pfs]
capacity_gb = 100000
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
[[pools]]
name = "prefill"
phase = "prefill"
nodes = ["n0"]
gpus = 8
tp = 8
ep = 8
[[pools]]
name = "decode"
phase = "decode"
nodes = ["n1"]
gpus = 8
tp = 8
ep = 8
"""


def _decode_mtps(tmp_path, *argv):
    path = tmp_path / "cluster.toml"
    path.write_text(CLUSTER)
    args = build_parser().parse_args(["replay", "--model", "deepseek-v3",
                                      "--cluster", str(path), *argv])
    prepared = prepare_or_fail(trace_paths(args), args.format, settings_from_args(args))
    bound = prepared.cluster.bind(prepared.model)
    return {w.layout.mtp for w in bound.workers if w.phase.name == "DECODE"}


@pytest.mark.parametrize(("argv", "mtp"), [
    ((), 1),  # DeepSeek-V3 ships one MTP module, and the cluster leaves mtp unset
    (("--mtp", "0"), 0),
    (("--mtp", "3"), 3),
])
def test_default_is_the_models_head_and_mtp_overrides_it(tmp_path, argv, mtp):
    assert _decode_mtps(tmp_path, *argv) == {mtp}


@pytest.mark.parametrize("value", ["-1", "two"])
def test_bad_mtp_is_one_line_and_exit_2(capsys, value):
    with pytest.raises(SystemExit) as exc:
        main(["replay", "--mtp", value])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1
    assert f"argument --mtp: expected an integer >= 0, got '{value}'" in err
