"""Decode's KV budget: the closed forms against a token-by-token count, preemption order,
and no use of a call's true output length."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.capacity import kv_capacity
from costmodel.hardware import load_hardware
from costmodel.layout import Layout
from costmodel.model import load_model
from tests.factories import small_cluster
from workers.kv_budget import (
    MIN_NEW_TOKEN_RATIO,
    RESERVE_TOKENS,
    RETRACT_STEPS,
    SCALAR_SEQUENCES,
    SCALAR_SEQUENCES_FULL,
    GrowthReserve,
    footprints,
    footprints_sum,
    preemption_count,
    steps_that_fit,
    steps_until_admissible,
)
from workers.pairwise import pairwise_sum
from workers.request import Request
from workers.runtime import ClusterRuntime

H200 = load_hardware("h200")
LLAMA = load_model("llama-3.1-70b")
GPT_OSS = load_model("gpt-oss-120b")  # half its layers slide over a 128-token window


def _squeezed(model, tokens, layout):
    kv = kv_capacity(model, H200, layout)
    per_token = kv.kv_bytes_per_token_per_gpu
    return dataclasses.replace(kv, budget_bytes_per_gpu=tokens * per_token)


def _count_steps(kv, contexts, other, horizon):
    """Footprints after each step k, evaluated directly: the last k before the first
    overflow."""
    k = np.arange(1, horizon + 1, dtype=np.float64)
    totals = other + footprints(kv, contexts[:, None] + k[None, :]).sum(axis=0)
    over = np.flatnonzero(totals > kv.instance_bytes)
    return int(over[0]) if len(over) else horizon


@pytest.mark.parametrize("model", [LLAMA, GPT_OSS], ids=["gqa", "sliding"])
def test_steps_that_fit_matches_a_token_by_token_count(model):
    layout = Layout(tp=4, ep=4) if model is LLAMA else Layout(tp=2, ep=2)
    kv = _squeezed(model, 20_000, layout)
    rng = np.random.default_rng(3)
    for _ in range(20):
        contexts = rng.integers(1, 4000, size=rng.integers(1, 6)).astype(np.float64)
        other = float(rng.uniform(0, 0.2)) * kv.instance_bytes
        want = _count_steps(kv, contexts, other, 3000)
        assert steps_that_fit(kv, contexts, other, 3000) == want
    assert steps_that_fit(kv, np.array([30_000.0]), 0.0, 50) == 0  # already over


def test_preemption_takes_the_latest_admitted_until_the_batch_can_run_on():
    kv = _squeezed(LLAMA, 10_000, Layout(tp=4))
    contexts = np.array([3000.0, 2000.0, 2500.0, 2490.0])  # admission order
    assert steps_that_fit(kv, contexts, 0.0, 100) == 2
    drop = preemption_count(kv, contexts, 0.0)
    assert drop == 1  # the last one: then 2,500 tokens of room for 3 sequences
    assert steps_that_fit(kv, contexts[:-drop], 0.0, 100) >= RETRACT_STEPS
    # Never the first: alone over capacity, it still runs.
    assert preemption_count(kv, np.array([12_000.0, 10.0]), 0.0) == 1


def test_admission_step_as_the_reserve_decays_matches_checking_each_step():
    kv = _squeezed(LLAMA, 12_000, Layout(tp=4))
    reserve = GrowthReserve(0.5)
    contexts, waiting, head = np.array([3000.0, 2500.0]), np.array([1000.0]), 1500.0

    def need(ctx, ratio):
        return footprints(kv, np.asarray(ctx) + ratio * RESERVE_TOKENS).sum()

    want = 0
    for k in range(1, 2000):
        ratio = float(reserve.ratio_after(k))
        if (need(contexts + k, ratio) + need(waiting, ratio) + need([head], ratio)
                <= kv.instance_bytes):
            want = k
            break
    assert want > 1
    assert steps_until_admissible(kv, reserve, contexts, waiting, head, 2000) == want
    assert steps_until_admissible(kv, reserve, contexts, waiting, head, want - 1) == 0


def test_reserve_decays_to_its_floor_and_rises_after_a_retraction():
    r = GrowthReserve()
    r.decay(10_000)
    assert r.ratio == pytest.approx(MIN_NEW_TOKEN_RATIO)
    r.after_preemption([2000, 3000])
    assert r.ratio == pytest.approx((5000 + 2 * RETRACT_STEPS) / (2 * RESERVE_TOKENS))


def test_decode_admission_does_not_read_the_true_output_length():
    rt = ClusterRuntime(small_cluster().bind(LLAMA), block_tokens=64)
    worker = rt.decode_workers["decode-0"]
    short, long = Request(1, "a", 5000, 10), Request(2, "b", 5000, 1_000_000)
    assert worker._admission_need(short) == worker._admission_need(long)
    assert worker._admission_need(short) > worker._footprint(short)  # a growth reserve


@pytest.mark.parametrize("model", [LLAMA, GPT_OSS], ids=["gqa", "sliding"])
def test_a_short_batch_sums_its_footprints_to_numpys_double(model):
    layout = Layout(tp=4, ep=4) if model is LLAMA else Layout(tp=2, ep=2)
    kv = kv_capacity(model, H200, layout)
    rng = np.random.default_rng(5)
    # The Python path and numpy's beyond it (16 sequences with sliding layers, 32
    # without).
    limit = SCALAR_SEQUENCES if model is GPT_OSS else SCALAR_SEQUENCES_FULL
    assert (kv.footprint_terms[1] != 0.0) == (model is GPT_OSS)
    for n in range(limit + 3):
        for _ in range(40):
            contexts = rng.uniform(0, 300_000, size=n) * rng.choice([1e-3, 1.0], size=n)
            assert footprints_sum(kv, contexts) == float(footprints(kv, contexts).sum())
            tokens = [int(c) for c in contexts]  # a decode worker's lengths, as a list
            assert footprints_sum(kv, tokens) == float(footprints(kv, tokens).sum())


def test_without_sliding_layers_footprints_leave_out_only_a_zero_term():
    kv = kv_capacity(LLAMA, H200, Layout(tp=4, ep=4))
    per_token, slide, state, window = kv.footprint_terms
    assert slide == 0.0
    contexts = np.concatenate(([0.0, 1.0, 0.5], np.random.default_rng(9).uniform(
        0, 300_000, size=500)))
    full = per_token * contexts + slide * np.minimum(contexts, window) + state
    assert np.array_equal(footprints(kv, contexts), full)
    assert [kv.sequence_bytes_per_gpu(c) for c in contexts[:50]] == full[:50].tolist()


@pytest.mark.parametrize("model", [LLAMA, load_model("kimi-k3-like"), GPT_OSS],
                         ids=["gqa", "mla-linear", "sliding"])
def test_whole_token_counts_sum_their_footprints_exactly_as_numpy(model):
    kv = kv_capacity(model, H200, Layout(tp=2, ep=8))
    assert (kv.integer_footprints is None) == (model is GPT_OSS)
    rng = np.random.default_rng(11)
    for n in [*range(1, 40), 100, 300, 1000]:
        tokens = [int(t) for t in rng.integers(0, 400_000, size=n)]
        assert footprints_sum(kv, tokens) == float(footprints(kv, tokens).sum())
    # Past 2**53 bytes in all (or not whole numbers), the float path decides.
    huge = [2**53 // 1000] * 2000
    assert footprints_sum(kv, huge) == float(footprints(kv, huge).sum())
    mixed = [1000, 2000.5, 3000]
    assert footprints_sum(kv, mixed) == float(footprints(kv, mixed).sum())


@settings(max_examples=60)
@given(st.lists(st.floats(-1e12, 1e12, allow_nan=False), max_size=700))
def test_pairwise_sum_adds_as_numpy(values):
    assert pairwise_sum(values) == np.add.reduce(np.array(values, dtype=np.float64))


@pytest.mark.parametrize("model", [LLAMA, GPT_OSS], ids=["gqa", "sliding"])
@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.tuples(st.integers(0, 300_000), st.integers(0, 40_000)),
                        max_size=40),
       decayed=st.integers(0, 5_000))
def test_the_held_batchs_admission_sum_is_the_sum_of_its_needs(model, lengths, decayed):
    """`_admission_needs_sum` (one pass without sliding layers) gives the double that summing
    each sequence's need does, at any reserve (decayed by some steps)."""
    rt = ClusterRuntime(small_cluster().bind(model), block_tokens=64)
    worker = rt.decode_workers["decode-0"]
    worker._reserve.decay(decayed)
    reqs = []
    for i, (inputs, generated) in enumerate(lengths):
        req = Request(i, "s", inputs, generated + 1)
        req.generated = generated
        reqs.append(req)
    assert (worker.kv.linear_terms is None) == (model is GPT_OSS)
    want = sum(worker._admission_need(r) for r in reqs)
    assert worker._admission_needs_sum(reqs) == want
