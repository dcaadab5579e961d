"""The planner's arrangements (three pools, two, aggregated workers), the memory fraction
a worker may allocate, KV within the model's context, TTFT on a queued prompt, and the
search for the fewest GPUs that sustain a rate."""

import numpy as np
import pytest

from costmodel.hardware import load_hardware
from costmodel.model import load_model
from costmodel.plan import plan_cluster
from costmodel.plan_candidates import QUEUED_STEPS
from costmodel.plan_search import plan_for_rate
from costmodel.plan_values import ARRANGEMENTS, PlanError, Targets, WorkloadStats
from costmodel.precision import Precision

K3 = load_model("kimi-k3-like")
OSS = load_model("gpt-oss-120b")
GB200, B200, H100 = (load_hardware(h) for h in ("gb200", "b200", "h100"))


def agent_like(calls=200, output_tokens=300, context=100_000, cold_every=10):
    """Agent sessions in miniature: one cold call in `cold_every`, the rest long cached
    prefixes with short suffixes."""
    rng = np.random.default_rng(7)
    inp = np.floor(rng.uniform(0.5, 1.5, calls) * context)
    cold = np.arange(calls) % cold_every == 0
    cached = np.where(cold, 0.0, np.floor(inp - rng.uniform(200, 3000, calls)))
    return WorkloadStats(calls // 20, inp, cached, np.full(calls, float(output_tokens)),
                         calls * 60.0, 4096)


def plan(model=K3, hw=GB200, gpus=72, workload=None, ttft=2.0, tpot=0.05, **kw):
    return plan_cluster(model, hw, gpus, workload or agent_like(), Targets(ttft, tpot),
                        model.routed_expert_precision or Precision.FP8, Precision.BF16, **kw)


def test_each_arrangement_names_its_pools_and_auto_keeps_the_fastest():
    names = {"three-pool": ["prefill", "midfill", "decode"], "two-pool": ["prefill", "decode"],
             "mixed": ["mixed"]}
    rates = {}
    for a in ARRANGEMENTS:
        p = plan(arrangement=a, ttft=5.0)
        assert p.arrangement == a and [x.name for x in p.pools] == names[a]
        rates[a] = p.calls_per_s
    auto = plan(ttft=5.0)
    assert auto.calls_per_s == max(rates.values())
    assert dict(auto.alternatives) == pytest.approx(rates)
    mixed = plan(arrangement="mixed", ttft=5.0).pools[0].choice
    assert mixed.mixed and mixed.chunk_tokens > 0 and mixed.pp == 1


def test_a_model_on_fewer_gpus_than_three_pools_need_is_planned_aggregated():
    """The issue's case: kimi-k3-like's smallest fill and decode workers on B200 are 16
    GPUs each, so three pools need 48 and two need 32; on 32 the plan is made."""
    with pytest.raises(PlanError, match="too few"):
        plan(hw=B200, gpus=32, arrangement="three-pool", ttft=5.0)
    p = plan(hw=B200, gpus=32)
    assert p.used_gpus <= 32 and p.calls_per_s > 0


def test_a_pool_serving_few_calls_does_not_take_half_the_gpus():
    """The issue's case: gpt-oss-120b on 8 H100, one cold call in fifty."""
    p = plan(model=OSS, hw=H100, gpus=8, workload=agent_like(cold_every=50))
    fills = [x for x in p.pools if x.name == "prefill"]
    assert all(x.gpus < 4 for x in fills)
    three = plan(model=OSS, hw=H100, gpus=8, workload=agent_like(cold_every=50),
                 arrangement="three-pool", ttft=5.0)
    assert p.calls_per_s > three.calls_per_s


@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
def test_every_worker_allocates_within_the_memory_fraction(arrangement):
    for fraction in (0.85, 0.7):
        p = plan(arrangement=arrangement, ttft=5.0, memory_fraction=fraction)
        for x in p.pools:
            assert x.choice.hbm_bytes_per_gpu <= fraction * GB200.hbm_bytes
            assert x.choice.weight_bytes_per_gpu < x.choice.hbm_bytes_per_gpu


def test_the_whole_hbm_admits_a_fuller_worker_than_the_fraction():
    whole = plan(arrangement="three-pool", ttft=5.0, memory_fraction=None)
    most = max(x.choice.hbm_bytes_per_gpu for x in whole.pools)
    assert most > 0.85 * GB200.hbm_bytes  # the old plan: a worker at ~95% of HBM
    with pytest.raises(PlanError, match="--memory-fraction"):
        plan(memory_fraction=1.5)


def test_kv_is_checked_no_longer_than_the_context_window():
    """gpt-oss-120b's window is 131,072 tokens; contexts of the trace run past it."""
    w = agent_like(context=150_000)
    assert np.percentile(w.input_tokens + w.output_tokens, 90) > OSS.max_context_tokens
    for a in ARRANGEMENTS:
        shapes = w.shapes(a, OSS.max_context_tokens)
        for s in shapes.values():
            assert s.check_context <= OSS.max_context_tokens
            assert s.context_tokens.max(initial=0) <= OSS.max_context_tokens
    p = plan(model=OSS, hw=H100, gpus=8, workload=w, ttft=5.0)
    assert p.context_window_tokens == OSS.max_context_tokens
    for x in p.pools:
        assert x.shape.check_context <= OSS.max_context_tokens


def test_a_fill_is_checked_on_a_queued_prompt():
    p = plan(arrangement="three-pool", ttft=5.0)
    for x in p.pools:
        c = x.choice
        if x.name in ("prefill", "midfill"):
            assert c.latency_s == pytest.approx(QUEUED_STEPS * c.step_s)
            assert c.step_s <= 5.0 / QUEUED_STEPS
    m = plan(arrangement="mixed", ttft=5.0).pools[0].choice
    assert m.step_s < m.ttft_s <= 5.0  # the step in progress, then at least one of its own
    # A target one bare step of the fill meets but a queued prompt does not.
    bare = min(x.choice.step_s for x in p.pools if x.name == "prefill")
    with pytest.raises(PlanError, match="queued"):
        plan(arrangement="three-pool", ttft=bare * 1.01)


def test_the_search_finds_the_fewest_gpus_that_sustain_the_rate():
    w = agent_like()
    base = plan(gpus=72, workload=w)
    need = 3.0 * base.calls_per_s
    s = plan_for_rate(K3, GB200, w, Targets(2.0, 0.05), Precision.FP4, Precision.BF16, need,
                      option="--sessions-per-hour 1")
    assert s.plan.calls_per_s >= need
    tried = dict(s.tried)
    assert s.plan.gpus in tried
    below = tried[s.plan.gpus - 1]  # bisection ends on two neighbours
    assert below is None or below < need
    # It is the plan of that many GPUs.
    again = plan(gpus=s.plan.gpus, workload=w)
    assert again.calls_per_s == pytest.approx(s.plan.calls_per_s)


def test_the_search_counts_decode_slots_when_asked():
    w = agent_like()
    s = plan_for_rate(K3, GB200, w, Targets(2.0, 0.05), Precision.FP4, Precision.BF16, 0.1,
                      slots=5000, option="--concurrency 5000")
    assert s.plan.decode_slots >= 5000
    with pytest.raises(PlanError, match="--concurrency 5000: not met"):
        plan_for_rate(K3, GB200, w, Targets(2.0, 0.05), Precision.FP4, Precision.BF16, 0.1,
                      slots=5000, option="--concurrency 5000", max_gpus=64)


def test_a_mixed_file_leaves_the_planned_chunk_beside_a_full_decode_batch():
    import tomllib

    from costmodel.plan_toml import render_cluster_toml

    p = plan(arrangement="mixed", ttft=5.0)
    c = p.pools[0].choice
    (pool,) = tomllib.loads(render_cluster_toml(p, "m", "test"))["pools"]
    assert pool["phase"] == "mixed" and pool["target_batch"] == c.batch
    decodes = pool["target_batch"] * c.ranks * (1 + pool["mtp"])
    assert pool["max_batch_tokens"] - decodes == c.chunk_tokens
    assert p.pools[0].shape.check_context == agent_like().shapes("mixed")["decode"].check_context


@pytest.mark.parametrize("arrangement", ["three-pool", "two-pool"])
def test_sizing_many_gpus_from_each_pools_share_ends_where_one_worker_steps_end(
        arrangement, monkeypatch):
    import costmodel.plan_sizing as sizing

    def figures():
        p = plan(gpus=4608, ttft=5.0, arrangement=arrangement)
        return [(x.name, x.workers, x.choice.gpus) for x in p.pools], p.calls_per_s

    bulk = figures()
    monkeypatch.setattr(sizing, "BULK_START_GPUS", 10**9)
    assert bulk == figures()
