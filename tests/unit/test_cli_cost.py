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


def _cost_json(capsys, *extra):
    assert main([*BASE, *extra, "--json"]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


def test_a_layout_that_does_not_fit_is_priced_with_one_warning(capsys):
    # All of DeepSeek-V3 on one H200: 671 GB of weights on a 141 GB GPU.
    out, err = _cost_json(capsys, "--tp", "1", "--ep", "1")
    assert out["fits"] is False and out["step_time_s"] > 0
    assert out["kv_capacity_tokens"] == 0 and out["kv_capacity_sequences"] == 0
    assert err.count("\n") == 1
    # 673.3 GB with the model's weights, 684.9 with its MTP module resident (decode drafts
    # one token by default: 11.6B parameters, FP8 experts).
    assert err.startswith("warning: does not fit: 684.9 GB per GPU > 141.0 GB HBM of h200")
    # The text form prints its figures too, with the same one warning.
    assert main([*BASE, "--tp", "1", "--ep", "1"]) == 0
    captured = capsys.readouterr()
    assert "fits in HBM" in captured.out and "NO" in captured.out
    assert captured.err.count("warning: does not fit") == 1


def test_a_batch_whose_kv_overflows_is_reported_not_refused(capsys):
    out, err = _cost_json(capsys, "--batch", "400")
    assert out["fits"] is False and out["weight_bytes_per_gpu"] < 141e9
    assert "does not fit" in err and "batch 400, context 8192" in err


def test_a_layout_that_fits_warns_nothing_and_reports_kv_capacity(capsys):
    out, err = _cost_json(capsys)
    assert out["fits"] is True and err == ""
    # MLA's latent is on every TP rank: TP8 holds one copy per 8 GPUs; TP1 x 8 DP ranks
    # hold eight, less TP1's larger share of the non-expert weights: ~6x for DeepSeek-V3.
    dp, _ = _cost_json(capsys, "--tp", "1")
    assert 5.5 < dp["kv_capacity_tokens"] / out["kv_capacity_tokens"] < 6.5
    # One attention rank, no per-sequence state: whole sequences of the --context length
    # (84 before the MTP module's 1.45 GB per GPU was resident, 82 with it).
    assert out["kv_capacity_sequences"] == out["kv_capacity_tokens"] // 8192 == 82
    assert main(BASE) == 0
    text = capsys.readouterr().out
    assert "KV capacity per instance" in text and f"{out['kv_capacity_tokens']:,} tokens" in text


def test_attention_precision_is_separate_from_the_experts(capsys):
    fp8, _ = _cost_json(capsys)
    bf16, _ = _cost_json(capsys, "--attention-precision", "bf16")
    assert fp8["precision"] == bf16["precision"] == "fp8"
    assert (fp8["attention_precision"], bf16["attention_precision"]) == ("fp8", "bf16")
    assert bf16["weight_bytes_per_gpu"] > fp8["weight_bytes_per_gpu"]
    fp4, _ = _cost_json(capsys, "--precision", "fp4")
    assert fp4["attention_precision"] == "fp8"  # the default rule: FP8 or wider


def test_mtp_defaults_to_the_models_shipped_head(capsys):
    ds, _ = _cost_json(capsys)
    off, _ = _cost_json(capsys, "--mtp", "0")
    assert ds["mtp"] == 1 and off["mtp"] == 0
    assert ds["tpot_s"] == pytest.approx(ds["step_time_s"] / 1.85)
    assert off["tpot_s"] == off["step_time_s"]
    k3 = ["cost", "--model", "kimi-k3-like", "--hardware", "gb200", "--phase", "decode",
          "--batch", "4", "--context", "8192", "--tp", "8", "--ep", "64", "--precision", "fp4",
          "--json"]
    assert main(k3) == 0
    assert json.loads(capsys.readouterr().out)["mtp"] == 0


def test_bad_attention_precision_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main([*BASE, "--attention-precision", "fp4"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "--attention-precision" in err


def test_split_decode_reports_resident_overflow_of_a_side(capsys):
    k3 = ["cost", "--model", "kimi-k3-like", "--hardware", "gb200", "--phase", "decode",
          "--context", "131072", "--tp", "8", "--ep", "8", "--precision", "fp4",
          "--af-experts-hardware", "gb200", "--af-experts-ep", "32", "--json"]
    assert main([*k3, "--batch", "4"]) == 0
    small = capsys.readouterr()
    assert json.loads(small.out)["fits"] is True and small.err == ""
    assert main([*k3, "--batch", "200"]) == 0
    big = capsys.readouterr()
    out = json.loads(big.out)
    assert out["fits"] is False and out["kv_capacity_tokens"] > 0
    assert big.err.count("\n") == 1 and "of gb200 (attention GPUs; batch 200" in big.err


def test_the_engine_prices_its_host_gaps_and_is_recorded(capsys):
    sglang, _ = _cost_json(capsys)
    vllm, _ = _cost_json(capsys, "--engine", "vllm")
    assert sglang["engine"] == "sglang" and vllm["engine"] == "vllm"
    # costmodel/data/engines.toml: 1.5 and 4 ms a step.
    assert vllm["step_time_s"] - sglang["step_time_s"] == pytest.approx(2.5e-3, rel=1e-9)


def test_mtp_acceptance_is_an_option_and_changes_tokens_per_step(capsys):
    default, _ = _cost_json(capsys)
    assert default["mtp_acceptance"][:2] == [0.85, 0.72]  # the model file's
    low, _ = _cost_json(capsys, "--mtp-acceptance", "0.5,0.3")
    assert low["mtp_acceptance"] == [0.5, 0.3]
    assert low["tokens_per_step"] == pytest.approx(default["tokens_per_step"] / 1.85 * 1.5)


@pytest.mark.parametrize(("option", "value", "named"), [
    ("--engine", "tgi", "--engine: unknown engine 'tgi'"),
    ("--mtp-acceptance", "0.5,0.7", "position 2 (0.7) above position 1"),
    ("--mtp-acceptance", "1.5", "probabilities in [0, 1]"),
])
def test_a_bad_engine_or_acceptance_is_one_line_exit_2(option, value, named, capsys):
    with pytest.raises(SystemExit) as exc:
        main([*BASE, option, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and named in err, err
