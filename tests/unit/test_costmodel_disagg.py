"""Attention-FFN split decode pricing (costmodel/disagg.py) and its `cost` CLI options."""

import json
from dataclasses import replace

import numpy as np
import pytest

from costmodel.disagg import AFLayout, af_decode_times, af_evaluate, check_af_layout
from costmodel.efficiency import DEFAULT_EFFICIENCY, OverlapMode
from costmodel.errors import CostModelError, LayoutError
from costmodel.hardware import HardwareTable, load_hardware
from costmodel.layout import Layout, check_layout
from costmodel.model import load_model
from costmodel.phase import Configs, Phase
from costmodel.precision import Precision
from orchestrator.cli import main

K3 = load_model("kimi-k3-like")
GB200, H200 = load_hardware("gb200"), load_hardware("h200")
TABLE = HardwareTable((GB200, H200))
K = 1024


def decode(batch=1, context=128 * K, tp=8, ep=8, **kw):
    return Configs.make(phase=int(Phase.DECODE), batch=batch, new_tokens=1, context=context,
                        tp=tp, ep=ep, precision=int(Precision.FP4), **kw)


def split(cfg, expert_hw=0, expert_ep=64, same=True, n=1, eff=DEFAULT_EFFICIENCY):
    return af_decode_times(K3, TABLE, cfg, expert_hw, expert_ep, int(Precision.FP4), eff,
                           same, n)


def test_attention_side_does_not_depend_on_expert_hardware():
    _, _, on_gb200 = split(decode(batch=[1, 4, 16]), expert_hw=0, expert_ep=64)
    _, _, on_h200 = split(decode(batch=[1, 4, 16]), expert_hw=1, expert_ep=64, same=False)
    assert np.array_equal(on_gb200.attention_s, on_h200.attention_s)
    assert np.array_equal(on_gb200.kv_bytes_per_gpu, on_h200.kv_bytes_per_gpu)
    assert np.all(on_h200.expert_s > on_gb200.expert_s)  # H200 reads experts slower


def test_network_grows_when_the_instances_are_not_in_one_scale_up_domain():
    cfg = decode(batch=[1, 4, 16])
    step_in, _, inside = split(cfg, same=True)
    step_out, _, outside = split(cfg, same=False)
    assert np.all(outside.a2a_s > 5 * inside.a2a_s)  # NIC 50 GB/s against NVLink 900 GB/s
    assert np.all(outside.latency_s > inside.latency_s)  # scale-out all-to-all floors
    assert np.all(step_out > step_in)
    # The same bytes cross either link: only the link differs.
    assert np.array_equal(outside.attention_a2a_bytes_per_gpu, inside.attention_a2a_bytes_per_gpu)


def test_at_batch_1_each_expert_gpu_reads_few_experts():
    _, _, parts = split(decode(batch=1), expert_ep=64)
    per_gpu = np.ceil(896 / 64)  # 14 experts of each layer live on every expert GPU
    # One token picks 16 of 896 experts: about 16 * 14 / 896 = 0.25 of them per GPU.
    assert parts.experts_read_per_gpu_per_layer[0] == pytest.approx(16 * per_gpu / 896, rel=1e-6)
    assert parts.expert_hbm_read_bytes_per_gpu[0] < 0.02 * parts.expert_weight_bytes_per_gpu[0]
    _, _, busy = split(decode(batch=64), expert_ep=64)
    assert busy.experts_read_per_gpu_per_layer[0] > 8 * parts.experts_read_per_gpu_per_layer[0]


def test_n_attention_instances_on_one_expert_instance_equal_one_wider_instance():
    # 7 instances of TP8 sharing EP16 = one TP8 instance with 7 DP ranks on EP16.
    step_n, _, shared = split(decode(batch=4, ep=8), expert_ep=16, n=7)
    step_1, _, wide = split(decode(batch=4, ep=56), expert_ep=16, n=1)
    assert step_n[0] == pytest.approx(step_1[0], rel=1e-12)
    assert shared.tokens_per_s_per_gpu[0] == pytest.approx(wide.tokens_per_s_per_gpu[0], rel=1e-12)


def test_overlap_mode_names_how_the_three_parts_meet():
    cfg = decode(batch=4)
    serial = replace(DEFAULT_EFFICIENCY, overlap=OverlapMode.SERIAL)
    full = replace(DEFAULT_EFFICIENCY, overlap_fraction=1.0)
    fixed = DEFAULT_EFFICIENCY.step_overhead_s
    step_s, _, p = split(cfg, eff=serial)
    assert step_s[0] == pytest.approx(
        p.attention_s[0] + p.expert_s[0] + p.network_s[0] + p.latency_s[0] + fixed, rel=1e-12)
    step_f, _, p = split(cfg, eff=full)
    longest = max(p.attention_s[0], p.expert_s[0], p.network_s[0])
    assert step_f[0] == pytest.approx(longest + p.latency_s[0] + fixed, rel=1e-12)
    assert split(cfg)[0][0] < step_s[0]


def test_vectorised_equals_one_at_a_time_and_mtp_divides_the_step():
    batches, contexts = [1, 2, 8, 32], [1 * K, 32 * K, 128 * K, 500 * K]
    step, tpot, _ = split(decode(batch=batches, context=contexts, mtp=[0, 1, 0, 2]),
                          expert_hw=[0, 1, 0, 1], expert_ep=[64, 32, 16, 64],
                          same=[True, False, True, False])
    for i in range(4):
        alone = split(decode(batch=batches[i], context=contexts[i], mtp=[0, 1, 0, 2][i]),
                      expert_hw=[0, 1, 0, 1][i], expert_ep=[64, 32, 16, 64][i],
                      same=[True, False, True, False][i])
        assert alone[0][0] == step[i] and alone[1][0] == tpot[i]
    assert tpot[0] == step[0] and tpot[1] < step[1]


def test_misuse_raises():
    with pytest.raises(CostModelError, match="no routed experts"):
        af_decode_times(load_model("llama-3.1-70b"), TABLE, decode(tp=8), 0, 8,
                        int(Precision.FP8))
    with pytest.raises(CostModelError, match="decode steps only"):
        split(replace(decode(), phase=np.array([int(Phase.PREFILL)])))
    with pytest.raises(CostModelError, match="decode steps only"):
        split(decode(pp=2))
    with pytest.raises(LayoutError, match="experts_hardware: required"):
        AFLayout(tp=8)


def test_split_layouts_fit_where_colocated_ones_do_not():
    with pytest.raises(LayoutError, match="does not fit"):
        check_layout(K3, GB200, Layout(tp=4, ep=4, weights=Precision.FP4))
    ok = AFLayout(tp=4, ep=4, weights=Precision.FP4, experts_hardware=GB200, experts_ep=64,
                  experts_weights=Precision.FP4, same_domain=True)
    check_af_layout(K3, GB200, ok)
    with pytest.raises(LayoutError, match=r"experts_ep=4: the expert slice does not fit"):
        check_af_layout(K3, GB200, replace(ok, experts_ep=4))
    with pytest.raises(LayoutError, match="exceed the 72-GPU scale-up domain"):
        check_af_layout(K3, GB200, replace(ok, attention_per_expert=3))
    with pytest.raises(LayoutError, match="pp=2"):
        check_af_layout(K3, GB200, replace(ok, pp=2))
    row = af_evaluate(K3, GB200, ok, 4, 128 * K)
    assert row["fits"] and row["gpus"] == 68


CLI = ["cost", "--model", "kimi-k3-like", "--hardware", "gb200", "--phase", "decode",
       "--batch", "4", "--context", "131072", "--tp", "8", "--ep", "32", "--precision", "fp4"]


def test_cost_cli_prices_the_split(capsys):
    assert main([*CLI, "--af-experts-hardware", "gb200", "--af-experts-ep", "32", "--json"]) == 0
    up = json.loads(capsys.readouterr().out)
    assert up["network"] == "scale-up" and up["gpus"] == 64 and up["fits"]
    assert main([*CLI, "--af-experts-hardware", "gb200", "--af-experts-ep", "32",
                 "--af-network", "scale-out", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tpot_s"] > up["tpot_s"]
    assert main([*CLI, "--af-experts-hardware", "gb200", "--af-experts-ep", "32"]) == 0
    assert "experts read per expert GPU per layer" in capsys.readouterr().out


@pytest.mark.parametrize(("change", "message"), [
    (["--af-experts-ep", "32"], "--af-experts-ep: only with --af-experts-hardware"),
    (["--af-experts-hardware", "gb200"], "--af-experts-ep: required"),
    (["--af-experts-hardware", "gb200", "--af-experts-ep", "2"], "experts_ep=2: the expert slice"),
])
def test_cost_cli_split_errors_are_one_line(capsys, change, message):
    assert main([*CLI, *change]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
