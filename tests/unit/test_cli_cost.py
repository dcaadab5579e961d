import json

import pytest

from orchestrator.cli import main

BASE = ["cost", "--model", "deepseek-v3", "--hardware", "h200", "--phase", "decode",
        "--batch", "4", "--context", "8192", "--tp", "8", "--ep", "8"]


def test_cost_json_has_the_contract_keys(capsys):
    assert main([*BASE, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("step_time_s", "tokens_per_s_per_gpu", "hbm_bytes_per_gpu",
                "scale_up_bytes_per_s_per_gpu", "scale_out_bytes_per_s_per_gpu", "energy_j",
                "bound"):
        assert key in out
    assert out["bound"] in ("compute", "memory", "network", "latency")


def test_cost_table(capsys):
    assert main(BASE) == 0
    assert "tokens/s per GPU" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (["--batch", "-3"], "argument --batch: expected a positive integer, got '-3'"),
        (["--batch", "many"], "expected a positive integer, got 'many'"),
        (["--context", "-1"], "argument --context: expected an integer >= 0"),
        (["--model", "nope"], "unknown model 'nope'; known: deepseek-v3"),
        (["--hardware", "tpu"], "unknown hardware 'tpu'; known: b200"),
        (["--tp", "3", "--ep", "3"], "tp=3 does not divide"),
        (["--precision", "int3"], "unknown precision 'int3'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, change, message):
    try:
        code = main([*BASE, *change])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and message in err
