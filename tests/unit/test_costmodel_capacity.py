"""KV capacity follows the attention layout: replication across TP ranks is counted."""

import numpy as np
import pytest

from costmodel.capacity import kv_capacity, kv_capacity_tokens_array
from costmodel.hardware import load_hardware
from costmodel.layout import Layout
from costmodel.model import load_model
from costmodel.precision import BYTES_PER_ELEMENT, Precision

H200 = load_hardware("h200")


def test_mla_latent_is_replicated_across_tp_ranks():
    """Per GB of free HBM, TP1 x DP8 holds 8x the tokens of TP8 on the same 8 GPUs."""
    m = load_model("deepseek-v3")
    dp = kv_capacity(m, H200, Layout(tp=1, ep=8))
    tp = kv_capacity(m, H200, Layout(tp=8, ep=8))
    per_gb_dp = dp.kv_capacity_tokens / dp.budget_bytes_per_gpu
    per_gb_tp = tp.kv_capacity_tokens / tp.budget_bytes_per_gpu
    assert per_gb_dp / per_gb_tp == pytest.approx(8.0, rel=1e-3)
    # TP1 holds a larger share of the attention weights, so less is free: ~6x in all.
    ratio = dp.kv_capacity_tokens / tp.kv_capacity_tokens
    assert 5.5 < ratio < 6.5
    # Every GPU of the TP8 group holds the whole latent: tokens = free bytes / KV per token.
    kvt = m.kv_bytes_per_token(BYTES_PER_ELEMENT[Precision.BF16])
    assert tp.kv_capacity_tokens == int(tp.budget_bytes_per_gpu // kvt)


def test_gqa_replicates_beyond_its_kv_heads():
    m = load_model("llama-3.1-70b")  # 8 KV heads
    h100 = load_hardware("h100")
    kvt = m.kv_bytes_per_token(2.0)
    for tp, split in ((2, 2), (8, 8)):
        c = kv_capacity(m, h100, Layout(tp=tp))
        assert c.kv_bytes_per_token_per_gpu == pytest.approx(kvt / split)
    q = load_model("qwen3-235b-a22b")  # 4 KV heads: TP8 holds each head twice
    c4 = kv_capacity(q, H200, Layout(tp=4, ep=8))
    c8 = kv_capacity(q, H200, Layout(tp=8, ep=8))
    assert c8.kv_bytes_per_token_per_gpu == pytest.approx(c4.kv_bytes_per_token_per_gpu)


def test_linear_state_counts_per_sequence():
    m = load_model("kimi-k3-like")
    gb200 = load_hardware("gb200")
    c = kv_capacity(m, gb200, Layout(tp=1, ep=72, weights=Precision.FP4))
    assert c.state_bytes_per_sequence_per_gpu > 100e6  # hundreds of MB of KDA state
    short = c.sequences_at(1_000)
    assert short < c.kv_capacity_tokens // 1_000  # the state, not the KV, limits short ones
    assert c.sequence_bytes_per_gpu(0) == pytest.approx(c.state_bytes_per_sequence_per_gpu)


def test_weights_that_do_not_fit_leave_no_capacity():
    m = load_model("deepseek-v3")
    c = kv_capacity(m, H200, Layout(tp=1, ep=1))
    assert not c.fits
    assert c.kv_capacity_tokens == 0 and c.sequences_at(1000) == 0


def test_array_form_agrees_with_the_scalar_form():
    m = load_model("deepseek-v3")
    tps, eps = np.array([1, 2, 4, 8, 1]), np.array([8, 8, 8, 8, 16])
    arr = kv_capacity_tokens_array(m, H200.hbm_bytes, 1, tps, eps, int(Precision.FP8))
    for i in range(len(tps)):
        one = kv_capacity(m, H200, Layout(tp=int(tps[i]), ep=int(eps[i])))
        assert arr[i] == one.kv_capacity_tokens


@pytest.mark.parametrize("name", ["llama-3.1-70b", "gpt-oss-120b", "kimi-k3-like"])
def test_many_footprints_are_the_one_footprint_doubles(name):
    """The batch form gives each sequence's double bit for bit: whole token counts, a
    context plus a fractional growth reserve, both sides of a sliding window."""
    kv = kv_capacity(load_model(name), H200, Layout(tp=2, ep=2))
    rng = np.random.default_rng(3)
    window = kv.window_tokens
    contexts = [0, 1, window - 1, window, window + 1, 0.5, window + 0.25,
                *(int(t) for t in rng.integers(0, 300_000, size=200)),
                *(int(t) + 4096 * r for t, r in zip(rng.integers(0, 300_000, size=200),
                                                    rng.uniform(0.098, 0.7, size=200),
                                                    strict=True))]
    many = kv.sequences_bytes_per_gpu(contexts)
    assert [x.hex() for x in many] == [kv.sequence_bytes_per_gpu(c).hex() for c in contexts]
    assert kv.sequences_bytes_per_gpu([]) == []


@pytest.mark.parametrize("name", ["llama-3.1-70b", "gpt-oss-120b", "kimi-k3-like"])
def test_summed_footprints_are_the_sum_of_the_footprints(name):
    """The shortcut in integers gives `sum()`'s double: whole token counts (exact), past
    2**53 bytes in all, fractional contexts and sliding windows (summed as floats)."""
    kv = kv_capacity(load_model(name), H200, Layout(tp=2, ep=2))
    assert (kv.integer_footprints is None) == (name == "gpt-oss-120b")
    rng = np.random.default_rng(4)
    batches = [[int(t) for t in rng.integers(0, 400_000, size=n)] for n in (1, 2, 17, 300)]
    batches += [[2**53 // 1000] * 2000, [1000, 2000.5, 3000], [0], []]
    for contexts in batches:
        got = kv.sequences_bytes_sum(contexts)
        want = sum(kv.sequences_bytes_per_gpu(contexts))
        assert type(got) is type(want) and got == want
        assert float(got).hex() == float(want).hex()
