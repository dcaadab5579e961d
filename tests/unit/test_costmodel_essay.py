"""The source essay's checks (its parallelism, KV crossover and batching
parts; docs/sources.md), as arithmetic on the cost core."""

import numpy as np
import pytest

from costmodel.hardware import HardwareTable, load_hardware
from costmodel.layout import Layout
from costmodel.model import load_model
from costmodel.phase import Bound, Configs, Phase, evaluate, phase_cost
from costmodel.precision import Precision
from costmodel.terms import distinct

K3 = load_model("kimi-k3-like")
GB200 = load_hardware("gb200")
FP4 = Precision.FP4


def test_70kB_times_2M_tokens_is_140GB():
    kv = load_model("deepseek-v3").kv_bytes_per_token()
    assert kv * 2_000_000 == pytest.approx(140e9, rel=0.01)


def test_128_tokens_8_routes_touch_about_251_of_256_experts():
    touched = distinct(256, 8, 128)
    assert 250.5 < touched < 252.5


def test_expert_bytes_follow_distinct_experts_touched():
    """Sorted by expert, each touched expert loads once: decode at batch 1 reads few experts,
    a 128-token batch reads almost all."""
    ds, h200 = load_model("deepseek-v3"), load_hardware("h200")
    lay = Layout(tp=8, ep=8)
    one = evaluate(ds, h200, Phase.DECODE, 1, 1, 1000, lay)
    many = evaluate(ds, h200, Phase.PREFILL, 1, 128, 0, lay)
    full = ds.n_moe_layers * 32 * ds.expert_params  # all 32 experts per rank, FP8
    assert one["hbm_read_bytes_per_gpu"] < 0.25 * full
    assert many["hbm_read_bytes_per_gpu"] > 0.95 * full


def test_kv_crossover_deeper_pipelines_stop_saving_memory():
    """Weights per stage fall as 1/P; KV per stage stays flat (P micro-batches in flight).
    Once W/P is of the order of KV plus working set, doubling P saves little."""
    pps = np.array([1, 2, 4, 8, 12, 24])
    cfg = Configs.make(phase=Phase.PREFILL, batch=1, new_tokens=32_000, context=0, pp=pps,
                       tp=4, ep=16, precision=FP4)
    c = phase_cost(K3, HardwareTable((GB200,)), cfg)
    kv = c.kv_bytes_per_gpu
    assert np.ptp(kv) / kv.mean() < 0.01
    w, total = c.weight_bytes_per_gpu, c.hbm_bytes_per_gpu
    rest = total - w
    assert w[0] / w[1] == pytest.approx(2, rel=0.05)
    saving = 1 - total[1:] / total[:-1]
    # Where weights dwarf the rest, deeper PP saves a lot; past the crossover, little.
    assert saving[0] > 0.4 and w[0] > 5 * rest[0]
    crossed = w[:-1] < rest[:-1]
    assert crossed.any() and (saving[crossed] < 0.25).all()


def test_decode_at_128k_batch_1_is_hbm_bound_and_best_interactive_batch_is_small():
    """At long context, batch 1 already keeps HBM busy; growing the batch adds latency
    quickly, so the largest batch within 20% of batch-1 TPOT is small (1-5)."""
    batches = np.arange(1, 65)
    cfg = Configs.make(phase=Phase.DECODE, batch=batches, new_tokens=1, context=128_000,
                       tp=1, ep=64, precision=FP4)
    c = phase_cost(K3, HardwareTable((GB200,)), cfg)
    # Since the per-class calibration (a 5.5 us kernel floor, fitted on the published
    # batch-1 steps) the fixed latencies of K3's 93 layers edge out its HBM time at batch
    # 1; HBM still dwarfs compute.
    assert c.bound[0] in (Bound.MEMORY, Bound.LATENCY)
    assert c.memory_s[0] > 3 * c.compute_s[0]
    within = batches[c.tpot_s <= 1.2 * c.tpot_s[0]]
    assert 1 <= within.max() <= 5


def test_midfill_arithmetic_intensity_is_about_100x_decode():
    lay = Layout(tp=4, ep=16, weights=FP4)
    mid = evaluate(K3, GB200, Phase.MIDFILL, 1, 1000, 31_000, lay)
    dec = evaluate(K3, GB200, Phase.DECODE, 1, 1, 32_000, lay)

    def intensity(r):
        return r["flops"] / r["gpus"] / r["hbm_read_bytes_per_gpu"]

    ratio = intensity(mid) / intensity(dec)
    assert 30 < ratio < 300


def test_batch_1_decode_of_large_moe_on_8_gpus_is_latency_bound():
    r = evaluate(load_model("deepseek-v3"), load_hardware("h200"), Phase.DECODE, 1, 1, 8192,
                 Layout(tp=8, ep=8))
    assert Bound(int(r["bound"])) is Bound.LATENCY


def test_big_decode_batches_are_not_latency_bound():
    r = evaluate(load_model("deepseek-v3"), load_hardware("h100"), Phase.DECODE, 256, 1, 2000,
                 Layout(ep=72))
    assert Bound(int(r["bound"])) is not Bound.LATENCY
