"""Data-parallel attention: requests are placed whole on attention ranks (round robin,
SGLang's data-parallel controller) and a step lasts as long as its slowest rank."""

import numpy as np
import pytest

from costmodel.batch import batch_attention_s, batch_step_cost, batch_token_terms, placed
from costmodel.hardware import HardwareTable, load_hardware
from costmodel.layout import Layout
from costmodel.model import load_model
from costmodel.phase import Configs, Phase, phase_cost
from costmodel.precision import Precision
from workers.pricing import StepPricer

DS = load_model("deepseek-v3")
GB200 = load_hardware("gb200")
TABLE = HardwareTable((GB200,))
DP8 = Layout(pp=1, tp=1, ep=8, weights=Precision.FP8, kv=Precision.BF16, mtp=0)


def test_requests_go_round_robin_over_the_ranks():
    rows = placed(11, 4)
    assert [r.tolist() for r in rows] == [[0, 4, 8], [1, 5, 9], [2, 6, 10], [3, 7]]
    assert [r.tolist() for r in placed(2, 8)] == [[0], [1]]


def test_one_prompt_fills_on_one_rank():
    """An 8k prompt on a GB200 DP8 prefill worker: its rank's attention alone (the whole
    prompt's causal attention, computed here from the model's fields) is longer than the
    whole step was priced when the prompt was spread over the eight ranks (69 ms)."""
    pricer = StepPricer(DS, GB200, DP8)
    one_s, _ = pricer.fill_s(Phase.PREFILL, 1, 8192, 0)
    s = 8192.0
    # Causal attention: query i sees i + 1 keys on average (i + 1) / 2 ... summed: s (s + 1) / 2.
    ctx_flops = DS.attn_flops_per_ctx_token_prefill * DS.n_full_layers * s * (s + 1.0) / 2.0
    v = batch_token_terms(DS, TABLE, False, 1, s, 0.0, pp=1, tp=1, ep=8,
                          precision=Precision.FP8, kv_precision=Precision.BF16, mtp=0)[0]
    assert ctx_flops / float(v.peak_attn[0]) > 0.069
    assert one_s > ctx_flops / float(v.peak_attn[0])
    # The ranks are not all busy: eight prompts (one a rank) take longer, by the routed
    # experts' extra tokens, and price as the uniform batch of one sequence a rank.
    eight_s, _ = pricer.fill_s(Phase.PREFILL, 8, 8192, 0)
    uniform = phase_cost(DS, TABLE, Configs.make(
        phase=int(Phase.PREFILL), batch=1, new_tokens=8192, context=0, tp=1, ep=8,
        precision=int(Precision.FP8)))
    assert eight_s == pytest.approx(float(uniform.step_time_s[0]), rel=1e-12)
    assert one_s < eight_s
    # The batch pricer (a fill worker's step) agrees.
    assert pricer.fill_step_s([8192], [0], False)[0] == pytest.approx(one_s, rel=1e-12)


def test_a_mixed_step_lasts_as_its_slowest_rank():
    """A chunk on one rank and decodes on the others: at least the chunk's rank's
    attention; more decodes on the other ranks (short contexts) change little."""
    pricer = StepPricer(DS, GB200, DP8)
    alone, _ = pricer.mixed_step_s([4096], [0], [])
    with_decodes, _ = pricer.mixed_step_s([4096], [0], [1024] * 63)
    assert alone <= with_decodes < 1.2 * alone
    attn = batch_attention_s(DS, batch_token_terms(
        DS, TABLE, False, 1, 4096.0, 0.0, pp=1, tp=1, ep=8, precision=Precision.FP8,
        kv_precision=Precision.BF16, mtp=0)[0], pricer.eff, np.array([4096.0]),
        np.array([0.0]), np.array([False]), 1.0)
    assert with_decodes > attn


def test_a_decode_step_prices_its_slowest_rank():
    """Nine sequences on eight ranks: one rank holds two, so the step is that of two
    sequences a rank, not of 9/8; one sequence a rank is the uniform batch's step."""
    pricer = StepPricer(DS, GB200, DP8)
    assert pricer.per_rank(9) == 2.0 and pricer.per_rank(8) == 1.0
    nine = pricer.decode_step_times_s(9, [4096.0])[0]
    eight = pricer.decode_step_times_s(8, [4096.0])[0]
    sixteen = pricer.decode_step_times_s(16, [4096.0])[0]
    assert eight < nine < sixteen
    batch = batch_step_cost(DS, TABLE, np.ones(9), np.full(9, 4096.0), True, tp=1, ep=8)
    assert batch.step_time_s == pytest.approx(nine, rel=1e-12)


def test_a_dp_fill_step_gives_each_rank_its_share_of_the_token_budget():
    """SGLang divides `chunked_prefill_size` by `dp_size` with DP attention: chunk k of a
    step runs on rank k mod ranks, within budget // ranks tokens of it."""
    from workers.batching import plan_fill_batch
    from workers.cluster import BatchPolicySpec
    from workers.request import Request

    reqs = [Request(i, f"s{i}", tokens, 1) for i, tokens in enumerate((10_000, 300, 5_000))]
    policy = BatchPolicySpec(max_batch_tokens=16_384, max_batch_sequences=8, target_batch=1)
    one = plan_fill_batch(reqs, policy)
    assert [c.tokens for c in one] == [10_000, 300, 5_000]
    four = plan_fill_batch(reqs, policy, ranks=4)
    assert [c.tokens for c in four] == [4_096, 300, 4_096]
    assert [c.last for c in four] == [False, True, False]
