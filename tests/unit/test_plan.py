"""The planning core: layouts under targets and KV, pools sized from the work mix."""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from costmodel.capacity import kv_capacity
from costmodel.hardware import load_hardware
from costmodel.model import load_model
from costmodel.phase import Phase
from costmodel.plan import plan_cluster
from costmodel.plan_candidates import Candidate
from costmodel.plan_sizing import Nodes, packs, size_pools
from costmodel.plan_values import PlanError, Targets, WorkloadStats
from costmodel.precision import Precision

K3 = load_model("kimi-k3-like")
GB200 = load_hardware("gb200")


def agent_like(calls=200, output_tokens=300, context=100_000):
    """Agent sessions in miniature: one cold call in ten, the rest long cached prefixes
    with short suffixes (the source essay's midfill, docs/sources.md)."""
    rng = np.random.default_rng(7)
    inp = rng.uniform(0.5, 1.5, calls) * context
    cold = np.arange(calls) % 10 == 0
    cached = np.where(cold, 0.0, np.floor(inp - rng.uniform(200, 3000, calls)))
    out = np.full(calls, float(output_tokens))
    return WorkloadStats(calls // 20, np.floor(inp), cached, out, calls * 60.0, 4096)


def plan(workload=None, gpus=72, hw=GB200, ttft=4.0, tpot=0.05, kv=Precision.BF16,
         arrangement="three-pool", memory_fraction=0.85):
    """Three pools unless asked: most tests here are about pools of one phase each. The
    TTFT target is checked on a queued prompt (two steps of a ~100k-token prefill)."""
    return plan_cluster(K3, hw, gpus, workload or agent_like(), Targets(ttft, tpot),
                        Precision.FP4, kv, arrangement=arrangement,
                        memory_fraction=memory_fraction)


def pool(p, name):
    return next(x for x in p.pools if x.name == name)


def test_decode_on_gb200_runs_data_parallel_attention_with_hundreds_of_slots():
    p = plan()
    d = pool(p, "decode").choice
    assert d.tp < max(d.tp, d.ep)  # attention ranks = stage width / tp > 1
    assert d.ranks == max(d.tp, d.ep) // d.tp
    assert p.decode_slots >= 200


def test_choices_meet_targets_and_hold_their_kv():
    p = plan()
    for x in p.pools:
        c = x.choice
        target = p.targets.tpot_s if c.phase is Phase.DECODE else p.targets.ttft_s
        assert c.latency_s <= target
        cap = kv_capacity(K3, GB200, c.layout)
        assert c.pp * c.batch * cap.ranks <= cap.sequences_at(x.shape.check_context)


def test_pools_are_whole_workers_within_the_gpus_and_nodes():
    for gpus in (72, 144):
        p = plan(gpus=gpus)
        assert p.used_gpus <= gpus
        sizes = [x.choice.gpus for x in p.pools for _ in range(x.workers)]
        assert packs(p.nodes, sizes)
        assert all(x.workers >= 1 for x in p.pools)


def test_a_tighter_tpot_target_buys_latency_with_throughput():
    loose, tight = pool(plan(tpot=0.05), "decode"), pool(plan(tpot=0.02), "decode")
    assert tight.choice.latency_s <= 0.02 < loose.choice.latency_s
    assert tight.choice.tokens_per_s_per_gpu < loose.choice.tokens_per_s_per_gpu


def test_longer_outputs_move_gpus_to_decode():
    short = plan(agent_like(output_tokens=100))
    long = plan(agent_like(output_tokens=2000))
    assert pool(long, "decode").gpus > pool(short, "decode").gpus
    assert long.calls_per_s < short.calls_per_s


def test_fp8_kv_holds_more_sequences_than_bf16():
    bf16, fp8 = pool(plan(), "decode").choice, pool(plan(kv=Precision.FP8), "decode").choice
    assert fp8.kv_capacity_tokens / fp8.gpus > bf16.kv_capacity_tokens / bf16.gpus


def test_the_same_inputs_give_the_same_plan():
    def figures(p):
        return [(x.name, x.workers, x.choice.layout, x.choice.batch, x.choice.latency_s,
                 x.choice.gpu_s_per_call) for x in p.pools] + [p.calls_per_s]

    assert figures(plan()) == figures(plan())


def test_a_fill_pool_gets_several_workers_when_the_gpus_allow():
    p = plan(gpus=144)
    assert pool(p, "midfill").workers >= 2


def test_too_few_gpus_and_unmeetable_targets_say_why():
    with pytest.raises(PlanError, match="--gpus 8"):
        plan(gpus=8)
    with pytest.raises(PlanError, match="--gpus 24: too few"):
        plan(gpus=24)
    with pytest.raises(PlanError, match=r"--tpot-target 0.0001: .* best achievable is"):
        plan(tpot=0.0001)
    with pytest.raises(PlanError, match=r"--ttft-target 0.001: .* best achievable is"):
        plan(ttft=0.001)
    with pytest.raises(PlanError, match="ttft_s"):
        Targets(0.0, 0.05)


def test_a_trace_without_decode_work_is_refused():
    w = agent_like()
    silent = WorkloadStats(w.sessions, w.input_tokens, w.cached_tokens,
                           np.ones_like(w.output_tokens), w.session_time_s, 4096)
    with pytest.raises(PlanError, match="no call that decodes"):
        plan(silent)


def _first_fit_one_at_a_time(nodes, workers):
    """The placement `packs` stands for, worker by worker: the largest first, one larger
    than a node on the first run of whole free nodes, any other on the first node with
    room for it."""
    free = nodes.sizes()
    for g in sorted(workers, reverse=True):
        if g > nodes.gpus_each:
            k = g // nodes.gpus_each
            start = next((s for s in range(len(free) - k + 1)
                          if all(free[j] == nodes.gpus_each for j in range(s, s + k))), None)
            if start is None:
                return False
            free[start:start + k] = [0] * k
            continue
        j = next((j for j, f in enumerate(free) if f >= g), None)
        if j is None:
            return False
        free[j] -= g
    return True


@given(count=st.integers(1, 10), each=st.sampled_from([4, 8, 16, 72]),
       short=st.integers(0, 71), data=st.data())
@example(count=1, each=8, short=0, data=[4, 4])
@example(count=3, each=8, short=4, data=[16, 8])
@example(count=3, each=8, short=4, data=[24])
@example(count=4, each=8, short=0, data=[16, 8, 4, 2, 2])
def test_packing_by_counts_is_first_fit_one_worker_at_a_time(count, each, short, data):
    """Nodes near full (the planner grows pools until they are): demand drawn up to
    about the GPUs there are."""
    nodes = Nodes.of(count * each - short % each, each)
    if isinstance(data, list):
        workers = data
    else:
        sizes = [g for g in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 72, 144) if g <= (count + 1) * each]
        workers = data.draw(st.lists(st.sampled_from(sizes), max_size=3 * count * each // 4 + 4))
    assert packs(nodes, workers) == _first_fit_one_at_a_time(nodes, workers)


def test_packing_places_wide_workers_on_whole_nodes():
    eight = Nodes.of(64, 8)
    assert packs(eight, [16, 16, 16, 16])
    assert not packs(eight, [16, 16, 16, 16, 8])
    assert not packs(Nodes.of(20, 8), [16, 8])  # the last node holds 4
    assert 12 in Nodes.of(72, 72).worker_sizes(72)
    assert Nodes.of(64, 8).worker_sizes(64) >= {8, 16, 24, 64}
    assert 20 not in Nodes.of(64, 8).worker_sizes(64)


def _candidate(phase, gpus, gpu_s_per_call):
    return Candidate(phase=phase, pp=1, tp=1, ep=gpus, batch=1, gpus=gpus, ranks=gpus,
                     latency_s=0.01, tokens_per_s_per_gpu=1.0, gpu_s_per_call=gpu_s_per_call,
                     weight_bytes_per_gpu=0.0, kv_bytes_per_gpu=0.0, hbm_bytes_per_gpu=0.0,
                     kv_capacity_tokens=1, precision=Precision.FP4, kv_precision=Precision.BF16)


def test_sizing_takes_two_small_fill_workers_over_one_big_one_that_is_barely_faster():
    fill = [_candidate(Phase.MIDFILL, 16, 0.50), _candidate(Phase.MIDFILL, 32, 0.48)]
    decode = [_candidate(Phase.DECODE, 32, 1.0)]
    s = size_pools([fill, decode], Nodes.of(64, 64))
    assert [c.gpus for c in s.choice] == [16, 32] and s.workers == (2, 1)
    # ... but not when the big one is much faster: the rate comes first beyond 15%.
    fill = [_candidate(Phase.MIDFILL, 16, 0.50), _candidate(Phase.MIDFILL, 32, 0.20)]
    decode = [_candidate(Phase.DECODE, 16, 0.2)]
    s = size_pools([fill, decode], Nodes.of(48, 48))
    assert [c.gpus for c in s.choice] == [32, 16]
    assert s.calls_per_s == pytest.approx(min(32 / 0.20, 16 / 0.2))


def test_an_open_loop_trace_reports_its_own_arrival_rate():
    w = agent_like()
    assert w.arrivals_per_s is None
    timed = WorkloadStats(w.sessions, w.input_tokens, w.cached_tokens, w.output_tokens,
                          w.session_time_s, 4096, arrival_span_s=100.0)
    assert timed.arrivals_per_s == pytest.approx(w.calls / 100.0)
