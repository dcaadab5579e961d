"""Separate precisions for routed experts and the other weights."""

import numpy as np
import pytest

from costmodel.hardware import HardwareTable, load_hardware
from costmodel.layout import Layout
from costmodel.memory import weight_bytes_per_gpu
from costmodel.model import load_model
from costmodel.phase import Configs, Phase, evaluate, phase_cost
from costmodel.precision import Precision, default_attention_precision

DS = load_model("deepseek-v3")
K3 = load_model("kimi-k3-like")
FP4, FP8, BF16 = Precision.FP4, Precision.FP8, Precision.BF16

# Figures from before non-expert weights had a precision of their own: with
# `attention_weights` unset every one must stay bit-for-bit the same.
PINNED = [
    (DS, "h200", Phase.DECODE, 4, 1, 8192, Layout(tp=8, ep=8),
     0.011700436590685663, 0.011700436590685663, 86181972678.76317, 83878190336.0),
    (DS, "b200", Phase.PREFILL, 2, 4096, 0, Layout(tp=8, ep=8, weights=BF16),
     0.15566352907704856, 0.15566352907704856, 170092661420.48196, 167756380672.0),
    (K3, "gb200", Phase.MIDFILL, 1, 1024, 31 * 1024,
     Layout(pp=4, tp=4, ep=16, weights=FP4, kv=FP8),
     0.04858741091649139, 0.04858741091649139, 26067122762.98485, 25195279360.0),
    (K3, "gb200", Phase.DECODE, 16, 1, 32768, Layout(ep=64, weights=FP4, kv=FP8),
     0.02319204520598686, 0.02319204520598686, 73819998112.8507, 61762519040.0),
    # One MTP draft: 1.85 tokens per step, as with the former scalar acceptance; the
    # draft pass of the MTP module (costmodel/draft.py) adds 0.20 ms to the 11.75 ms step
    # (0.24 ms to 14.23 ms since the per-class calibration of issue 33).
    # The MTP module's weights are resident where the layout drafts: 1.45 GB more per GPU
    # (11.6B parameters, routed experts in FP8, over EP8 / TP8; costmodel/memory.py).
    (DS, "h200", Phase.DECODE, 4, 1, 8192, Layout(tp=8, ep=8, mtp=1),
     0.014225676295069581, 0.007689554754091665, 87634336141.52634, 85329444352.0),
]


@pytest.mark.parametrize("case", PINNED, ids=lambda c: f"{c[0].name}-{c[2].name}")
def test_default_attention_precision_keeps_every_figure(case):
    model, hw, phase, batch, new, ctx, layout, step_s, tpot_s, hbm, weights = case
    row = evaluate(model, load_hardware(hw), phase, batch, new, ctx, layout)
    assert row["step_time_s"] == step_s and row["tpot_s"] == tpot_s
    assert row["hbm_bytes_per_gpu"] == hbm and row["weight_bytes_per_gpu"] == weights


def test_default_rule_is_fp8_or_wider():
    assert default_attention_precision([BF16, FP8, FP4]).tolist() == [BF16, FP8, FP8]
    assert Layout(weights=FP4).attention_precision is FP8
    assert Layout(weights=BF16).attention_precision is BF16
    assert Layout(weights=FP4, attention_weights=BF16).attention_precision is BF16


def test_layout_attention_weights_reach_the_weight_bytes():
    fp8 = float(weight_bytes_per_gpu(K3, Layout(ep=64, weights=FP4)))
    bf16 = float(weight_bytes_per_gpu(K3, Layout(ep=64, weights=FP4, attention_weights=BF16)))
    assert bf16 > fp8
    assert bf16 == float(weight_bytes_per_gpu(K3, pp=1, tp=1, ep=64, precision=FP4,
                                              attention_precision=BF16))


def test_non_expert_bytes_scale_with_attention_precision_only():
    """Experts fixed at FP4: BF16 non-expert weights add exactly the FP8 non-expert bytes."""
    def weights(attention):
        return float(weight_bytes_per_gpu(DS, pp=1, tp=8, ep=8, precision=FP4,
                                          attention_precision=attention))

    from costmodel.disagg import expert_slice_bytes_per_gpu

    experts = float(expert_slice_bytes_per_gpu(DS, 8, FP4))
    assert weights(BF16) - experts == pytest.approx(2 * (weights(FP8) - experts), rel=1e-12)


def test_attention_precision_column_prices_decode_and_is_vectorised():
    table = HardwareTable((load_hardware("gb200"),))
    cfg = Configs.make(phase=int(Phase.DECODE), batch=1, new_tokens=1, context=4096,
                       tp=8, ep=8, precision=int(FP4), kv_precision=int(FP8),
                       attention_precision=[int(FP8), int(BF16)])
    cost = phase_cost(DS, table, cfg)
    # Batch-1 decode reads the non-expert weights every step: BF16 reads more and is slower.
    assert cost.hbm_read_bytes_per_gpu[1] > cost.hbm_read_bytes_per_gpu[0]
    assert cost.step_time_s[1] > cost.step_time_s[0]
    assert cost.weight_bytes_per_gpu[1] > cost.weight_bytes_per_gpu[0]
    one = phase_cost(DS, table, Configs.make(
        phase=int(Phase.DECODE), batch=1, new_tokens=1, context=4096, tp=8, ep=8,
        precision=int(FP4), kv_precision=int(FP8), attention_precision=int(BF16)))
    assert one.step_time_s[0] == cost.step_time_s[1]


def test_configs_built_without_the_column_get_the_default_rule():
    cfg = Configs(phase=np.array([2]), batch=np.array([1.0]), new_tokens=np.array([1.0]),
                  context=np.array([10.0]), pp=np.array([1.0]), tp=np.array([1.0]),
                  ep=np.array([1.0]), precision=np.array([int(FP4)]),
                  hardware=np.array([0]), kv_precision=np.array([0]), mtp=np.array([0.0]))
    assert cfg.attention_precision.tolist() == [int(FP8)]


def test_a_workers_step_pricer_prices_with_the_layouts_attention_precision():
    from workers.pricing import StepPricer

    hw = load_hardware("b200")
    lay = Layout(tp=8, ep=8, weights=FP4, mtp=0)
    times = {}
    for attention in (None, BF16):
        layout = Layout(tp=8, ep=8, weights=FP4, mtp=0, attention_weights=attention)
        pricer = StepPricer(DS, hw, layout)
        times[attention] = float(pricer.decode_step_times_s(8, np.array([4096.0]))[0])
        row = evaluate(DS, hw, Phase.DECODE, 8, 1, 4096, layout)
        assert times[attention] == row["step_time_s"]
    # BF16 non-expert weights are twice the bytes of the default FP8 ones.
    assert times[BF16] > times[None]
    assert lay.attention_precision == FP8
