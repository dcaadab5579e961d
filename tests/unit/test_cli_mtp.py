"""`--mtp N` on the replaying commands: every decode pool, before the cluster is bound."""

import pytest

from orchestrator.cli import build_parser, main
from orchestrator.cli._replay_opts import settings_from_args, trace_paths
from orchestrator.cli._replay_run import prepare_or_fail


def _decode_mtps(*argv):
    args = build_parser().parse_args(["replay", "--model", "deepseek-v3",
                                      "--cluster", "gb200-nvl72x1", *argv])
    prepared = prepare_or_fail(trace_paths(args), args.format, settings_from_args(args))
    bound = prepared.cluster.bind(prepared.model)
    return {w.layout.mtp for w in bound.workers if w.phase.name == "DECODE"}


@pytest.mark.parametrize(("argv", "mtp"), [
    ((), 1),  # DeepSeek-V3 ships one MTP module, and the preset leaves mtp unset
    (("--mtp", "0"), 0),
    (("--mtp", "3"), 3),
])
def test_default_is_the_models_head_and_mtp_overrides_it(argv, mtp):
    assert _decode_mtps(*argv) == {mtp}


@pytest.mark.parametrize("value", ["-1", "two"])
def test_bad_mtp_is_one_line_and_exit_2(capsys, value):
    with pytest.raises(SystemExit) as exc:
        main(["replay", "--mtp", value])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1
    assert f"argument --mtp: expected an integer >= 0, got '{value}'" in err
