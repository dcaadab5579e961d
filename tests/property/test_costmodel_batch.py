"""A heterogeneous batch step priced per request (costmodel/batch.py) against phase_cost."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from costmodel.batch import batch_step_cost
from costmodel.hardware import HardwareTable, load_hardware
from costmodel.model import load_model
from costmodel.phase import Configs, Phase, phase_cost
from costmodel.precision import Precision

MODELS = {n: load_model(n) for n in ("kimi-k3-like", "deepseek-v3", "gpt-oss-120b")}
TABLE = HardwareTable(tuple(load_hardware(n) for n in ("gb200", "h200")))

layouts = st.fixed_dictionaries({
    "pp": st.sampled_from([1, 2, 4]),
    "tp": st.sampled_from([1, 2, 4, 8]),
    "ep": st.sampled_from([1, 4, 8, 16, 32]),
    "precision": st.sampled_from(list(Precision)),
    "hardware_index": st.integers(0, 1),
})


@given(model=st.sampled_from(sorted(MODELS)), phase=st.sampled_from(list(Phase)),
       per_rank=st.integers(1, 16), new=st.integers(1, 16_384),
       cached=st.integers(0, 200_000), mtp=st.integers(0, 2), lay=layouts)
def test_a_uniform_batch_prices_as_phase_cost(model, phase, per_rank, new, cached, mtp, lay):
    m = MODELS[model]
    ranks = max(lay["tp"], lay["ep"]) // lay["tp"]
    n = per_rank * ranks
    decoding = phase is Phase.DECODE
    mtp = mtp if decoding else 0
    cfg = Configs.make(phase=int(phase), batch=per_rank, new_tokens=new, context=cached,
                       pp=lay["pp"], tp=lay["tp"], ep=lay["ep"], precision=int(lay["precision"]),
                       hardware=lay["hardware_index"], mtp=mtp)
    expected = phase_cost(m, TABLE, cfg).step_time_s[0]
    got = batch_step_cost(m, TABLE, np.full(n, new), np.full(n, cached), decoding, mtp=mtp,
                          **lay)
    assert got.step_time_s == pytest.approx(expected, rel=1e-12)
    assert got.sequences == n


# Skewed batches: a request's new and cached tokens are drawn, then both columns sorted, so a
# longer chunk never has a shorter context (comonotone). That is the case the mean
# under-prices: attention's chunk^2 term is convex. (A batch whose long chunks have short
# contexts can cost less than its mean, since the chunk x context term then shrinks; so can
# sliding-window layers, whose min(context, window) is concave: hence full-attention models.)
requests = st.lists(st.tuples(st.integers(1, 16_384), st.integers(0, 200_000)),
                    min_size=2, max_size=24)


@given(model=st.sampled_from(["kimi-k3-like", "deepseek-v3"]), rows=requests,
       decoding=st.booleans(), lay=layouts)
def test_a_skewed_batch_costs_at_least_its_mean(model, rows, decoding, lay):
    # Every attention rank holds as many requests (round robin over a multiple of the
    # ranks): the uniform batch's ranks are then all alike, and the skewed batch's last
    # rank holds, block by block, the longest chunk and context.
    rows = rows * (max(lay["tp"], lay["ep"]) // lay["tp"])
    m = MODELS[model]
    new = np.sort(np.array([r[0] for r in rows], dtype=np.float64))
    cached = np.sort(np.array([r[1] for r in rows], dtype=np.float64))
    n = len(rows)
    skewed = batch_step_cost(m, TABLE, new, cached, decoding, **lay)
    uniform = batch_step_cost(m, TABLE, np.full(n, new.mean()), np.full(n, cached.mean()),
                              decoding, **lay)
    assert skewed.step_time_s >= uniform.step_time_s * (1 - 1e-12)
    assert skewed.tokens == pytest.approx(uniform.tokens)


def test_one_long_prompt_beside_short_ones_costs_more_than_the_mean_says():
    m = MODELS["kimi-k3-like"]
    new = np.array([64.0] * 7 + [32_000.0])
    even = batch_step_cost(m, TABLE, np.full(8, new.mean()), np.zeros(8), tp=4, ep=16)
    skewed = batch_step_cost(m, TABLE, new, np.zeros(8), tp=4, ep=16)
    assert skewed.attention_s > 1.5 * even.attention_s
    assert skewed.step_time_s > even.step_time_s


def test_decodes_riding_with_a_chunk_price_their_own_context():
    m = MODELS["deepseek-v3"]
    alone = batch_step_cost(m, TABLE, [2048], [0], False, tp=8, ep=8)
    mixed = batch_step_cost(m, TABLE, [2048, 1, 1], [0, 100_000, 100_000],
                            [False, True, True], tp=8, ep=8)
    assert mixed.tokens == 2050
    assert mixed.step_time_s > alone.step_time_s


def test_an_empty_batch_is_misuse():
    with pytest.raises(ValueError):
        batch_step_cost(MODELS["deepseek-v3"], TABLE, [], [])
