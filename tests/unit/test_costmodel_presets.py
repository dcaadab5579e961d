"""Hardware and model presets: figures from their public sources, errors that name the field."""

import json

import pytest

from costmodel.errors import CostModelError
from costmodel.hardware import hardware_names, load_hardware
from costmodel.model import load_model, model_names
from costmodel.precision import Precision


def test_all_hardware_presets_present():
    assert set(hardware_names()) >= {"h100", "h800", "h200", "b200", "gb200", "b300", "gb300",
                                      "mi355x"}


@pytest.mark.parametrize(
    ("name", "bf16_tf", "hbm_gb", "hbm_tb", "domain", "nic_gbit", "tdp"),
    [
        ("h100", 989, 80, 3.35, 8, 400, 700),
        ("h200", 989, 141, 4.8, 8, 400, 700),
        ("b200", 2250, 180, 8.0, 8, 400, 1000),
        ("gb200", 2500, 186, 8.0, 72, 400, 1200),
        ("gb300", 2500, 279, 8.0, 72, 800, 1400),
    ],
)
def test_hardware_figures_in_base_units(name, bf16_tf, hbm_gb, hbm_tb, domain, nic_gbit, tdp):
    hw = load_hardware(name)
    assert hw.bf16_flops_per_s == bf16_tf * 1e12
    assert hw.fp8_flops_per_s == pytest.approx(2 * bf16_tf * 1e12, rel=1e-3)
    assert hw.hbm_bytes == hbm_gb * 1e9
    assert hw.hbm_bytes_per_s == pytest.approx(hbm_tb * 1e12)
    assert hw.scale_up_domain_gpus == domain
    assert hw.scale_out_bytes_per_s == nic_gbit * 1e9 / 8
    assert hw.tdp_w == tdp


def test_nvlink_per_direction_is_half_the_bidirectional_figure():
    assert load_hardware("h100").scale_up_bytes_per_s == 450e9
    assert load_hardware("gb200").scale_up_bytes_per_s == 900e9


def test_hopper_fp4_runs_at_fp8_rate():
    h100 = load_hardware("h100")
    assert h100.flops_per_s(Precision.FP4) == h100.flops_per_s(Precision.FP8)
    assert load_hardware("b200").flops_per_s(Precision.FP4) == 9000e12


def test_user_adds_a_gpu_with_a_file(tmp_path, monkeypatch):
    from costmodel.hardware import DATA_DIR

    text = (DATA_DIR / "h100.toml").read_text()
    path = tmp_path / "myh100.toml"
    path.write_text(text.replace('name = "h100"', 'name = "myh100"').replace("3.35", "4.0"))
    assert load_hardware(str(path)).hbm_bytes_per_s == 4.0e12
    monkeypatch.setenv("TOKENFACTORY_HARDWARE_DIR", str(tmp_path))
    assert "myh100" in hardware_names()


def test_unknown_hardware_lists_known():
    with pytest.raises(CostModelError, match="unknown hardware 'tpu9'.*gb200.*h100"):
        load_hardware("tpu9")


@pytest.mark.parametrize(
    ("replace", "message"),
    [
        ("hbm_gb = 80", "field memory.hbm_gb is missing"),
        ("hbm_gb = -80", r"memory.hbm_gb: expected > 0, got -80"),
        ('hbm_gb = "lots"', r"memory.hbm_gb: expected a number, got 'lots'"),
        ("[memory]", "invalid TOML"),
    ],
)
def test_bad_hardware_file_names_the_field(tmp_path, replace, message):
    from costmodel.hardware import DATA_DIR

    text = (DATA_DIR / "h100.toml").read_text()
    bad = {"hbm_gb = 80": "", "[memory]": "[memory"}.get(replace)
    text = text.replace(replace if bad is not None else "hbm_gb = 80", bad if bad is not None
                        else replace)
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(CostModelError, match=message):
        load_hardware(str(path))


def test_all_model_presets_present():
    assert set(model_names()) >= {"deepseek-v3", "kimi-k2", "kimi-linear-48b", "qwen3-235b-a22b",
                                  "qwen3-next-80b", "gpt-oss-120b", "llama-3.1-70b",
                                  "kimi-k3-like"}


@pytest.mark.parametrize(
    ("name", "kv_bytes"),
    [
        ("deepseek-v3", 70_272),
        ("kimi-k2", 70_272),
        ("kimi-linear-48b", 8_064),
        ("qwen3-235b-a22b", 192_512),
        ("qwen3-next-80b", 24_576),
        ("gpt-oss-120b", 36_864),
        ("llama-3.1-70b", 327_680),
        ("kimi-k3-like", 27_648),
    ],
)
def test_kv_bytes_per_token_bf16_exact(name, kv_bytes):
    assert load_model(name).kv_bytes_per_token(2.0) == kv_bytes


def _at_published_precision(count: int, published: str) -> bool:
    """Whether `count` rounds to `published` ("37B", "1T", "5.1B") at the precision it is
    published to: the unit its suffix names, as many decimals as it shows."""
    number, unit = published[:-1], {"B": 1e9, "T": 1e12}[published[-1]]
    decimals = len(number.partition(".")[2])
    return round(count / unit, decimals) == float(number)


# Figures as the vendors publish them, and where (each model card's summary table or
# first paragraph). Not checked: presets whose published figure is the model's name and
# disagrees with the count at that precision: Llama 3.1 "70B" (70.55B counted), Kimi
# Linear "48B" total (49.1B), Qwen3-Next "3B" active (3.56B).
PUBLISHED = [
    # https://huggingface.co/deepseek-ai/DeepSeek-V3 : "671B total parameters with 37B
    # activated for each token" (the 14B multi-token-prediction module apart).
    ("deepseek-v3", "671B", "37B"),
    # https://huggingface.co/moonshotai/Kimi-K2-Instruct : Total Parameters 1T, Activated
    # Parameters 32B.
    ("kimi-k2", "1T", "32B"),
    # https://huggingface.co/Qwen/Qwen3-235B-A22B : "235B in total and 22B activated".
    ("qwen3-235b-a22b", "235B", "22B"),
    # https://huggingface.co/openai/gpt-oss-120b : "117B parameters with 5.1B active".
    ("gpt-oss-120b", "117B", "5.1B"),
]


@pytest.mark.parametrize(("name", "total", "active"), PUBLISHED)
def test_parameter_counts_match_published(name, total, active):
    m = load_model(name)
    assert _at_published_precision(m.total_params, total), (name, m.total_params / 1e9)
    assert _at_published_precision(m.active_params, active), (name, m.active_params / 1e9)


@pytest.mark.parametrize(("count", "published", "matches"), [
    (1_026_408_209_408, "1T", True), (1_600_000_000_000, "1T", False),
    (37_449_999_999, "37B", True), (37_500_000_001, "37B", False),
    (5_131_000_000, "5.1B", True), (5_131_000_000, "5.13B", True),
    (5_150_000_001, "5.1B", False)])
def test_published_precision_is_the_figures_last_digit(count, published, matches):
    assert _at_published_precision(count, published) is matches


@pytest.mark.parametrize(
    ("name", "state_mb"), [("kimi-linear-48b", 42), ("qwen3-next-80b", 75), ("kimi-k3-like", 289)]
)
def test_linear_attention_state_per_sequence(name, state_mb):
    # The fp32 recurrent state, layers x heads x key dim x value dim x 4 B from each
    # config (Kimi Linear: 20 x 32 x 128 x 128 x 4 = 41.9 MB); the short-conv tail adds a little.
    state = load_model(name).state_bytes_per_sequence()
    assert state_mb * 1e6 * 0.99 < state < state_mb * 1e6 * 1.06


def test_k3_like_preset_is_about_2_8_trillion():
    m = load_model("kimi-k3-like")
    assert 2.6e12 < m.total_params < 3.0e12
    assert m.n_full_layers == 24 and m.n_linear_layers == 69 and m.n_layer_groups == 24


def _write(tmp_path, config):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_hf_config_round_trip(tmp_path):
    from costmodel.model import DATA_DIR

    config = json.loads((DATA_DIR / "qwen3-235b-a22b.json").read_text())
    m = load_model(_write(tmp_path, config))
    assert m.kv_bytes_per_token() == 192_512 and m.moe.top_k == 8


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c.pop("hidden_size"), "field hidden_size is missing"),
        (lambda c: c.update(num_hidden_layers="94"), "field num_hidden_layers: expected an integer"),
        (lambda c: c.update(num_experts_per_tok=500), "num_experts_per_tok: 500 is more than"),
        (lambda c: c.update(vocab_size=0), r"field vocab_size: expected >= 1, got 0"),
        (lambda c: c.pop("model_type"), "field model_type is missing"),
    ],
)
def test_malformed_hf_config_names_the_field(tmp_path, mutate, message):
    from costmodel.model import DATA_DIR

    config = json.loads((DATA_DIR / "qwen3-235b-a22b.json").read_text())
    mutate(config)
    with pytest.raises(CostModelError, match=message):
        load_model(_write(tmp_path, config))


def test_invalid_json_names_file_and_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{\n "hidden_size": 4096,\n oops\n}')
    with pytest.raises(CostModelError, match=r"config.json:3: invalid JSON"):
        load_model(str(path))


def test_unknown_model_lists_known():
    with pytest.raises(CostModelError, match="unknown model 'gpt-5'.*deepseek-v3"):
        load_model("gpt-5")


@pytest.mark.parametrize(("edit", "message"), [
    (("compute", "fp4_tflop", 10000), r"field compute.fp4_tflop: unknown \(known: bf16_tflops"),
    ((None, "colour", "green"), r"field colour: unknown \(known: name, description, source"),
])
def test_a_hardware_file_with_an_unknown_field_is_refused(tmp_path, edit, message):
    """A typo of the optional fp4_tflops used to price FP4 at the FP8 rate silently."""
    import tomllib

    from costmodel.hardware import DATA_DIR, load_hardware_file

    data = tomllib.loads((DATA_DIR / "gb200.toml").read_text())
    section, key, value = edit
    (data[section] if section else data)[key] = value
    lines = [f'{k} = "{v}"' for k, v in data.items() if not isinstance(v, dict)]
    for name, table in data.items():
        if isinstance(table, dict):
            lines += [f"[{name}]", *(f"{k} = {v}" for k, v in table.items())]
    path = tmp_path / "mine.toml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(CostModelError, match=message):
        load_hardware_file(path)
