"""Requests through prefill -> decode and midfill -> decode on a small cluster, in virtual
time: completion times are exactly what the cost core predicts."""

import asyncio
import dataclasses

import numpy as np
import pytest

from costmodel.hardware import HardwareTable, load_hardware
from costmodel.model import load_model
from costmodel.phase import Configs, Phase, phase_cost
from costmodel.precision import Precision
from tests.factories import small_cluster
from workers.clock import VirtualClock
from workers.request import Request
from workers.runtime import ClusterRuntime

LLAMA = load_model("llama-3.1-70b")
H200 = HardwareTable((load_hardware("h200"),))
KV_PER_TOKEN = LLAMA.kv_bytes_per_token(2.0)


def predicted(phase, batch, new_tokens, context):
    cfg = Configs.make(phase=int(phase), batch=batch, new_tokens=new_tokens, context=context,
                       tp=4, precision=int(Precision.BF16))
    return phase_cost(LLAMA, H200, cfg)


def squeezed(bound, decode_kv_tokens):
    """`bound` with each decode worker's HBM holding only `decode_kv_tokens` of KV."""
    workers = []
    for w in bound.workers:
        if w.phase is Phase.DECODE:
            budget = decode_kv_tokens * w.kv.kv_bytes_per_token_per_gpu
            w = dataclasses.replace(w, kv=dataclasses.replace(w.kv, budget_bytes_per_gpu=budget))
        workers.append(w)
    return dataclasses.replace(bound, workers=tuple(workers))


def run(submissions, jump=True, keep_events=False, decode_kv_tokens=None):
    """submissions: (time_s, worker, Request). Returns the runtime after all are done."""

    async def main():
        bound = small_cluster().bind(LLAMA)
        if decode_kv_tokens is not None:
            bound = squeezed(bound, decode_kv_tokens)
        rt = ClusterRuntime(bound, block_tokens=64, keep_events=keep_events, jump=jump)
        rt.start()
        loop = asyncio.get_running_loop()
        for at_s, worker, req in submissions:
            await asyncio.sleep(at_s - loop.time())
            req.arrival_s = loop.time()
            rt.submit_fill(worker, req, loop.time())
        while len(rt.done) < len(submissions):
            await asyncio.sleep(0.5)
        await rt.stop()
        return rt

    return VirtualClock().run(main())


def test_prefill_then_decode_completes_when_the_cost_core_says():
    blocks = tuple(range(1, 100))  # 99 blocks of 64 tokens
    req = Request(1, "s1", input_tokens=99 * 64, output_tokens=50, block_ids=blocks)
    rt = run([(0.0, "prefill-0", req)])
    fill_s = predicted(Phase.PREFILL, 1, 99 * 64, 0).step_time_s[0]
    # Decode loads the KV from the prefill node's DRAM (200 GB/s) into HBM behind 4 host
    # links (4 x 64 GB/s): the slower is DRAM.
    load_s = 99 * 64 * KV_PER_TOKEN / 200e9
    # The fill yields the first token; decode makes 49 more at contexts 6337..6385,
    # one sequence on one attention rank.
    steps = predicted(Phase.DECODE, 1, 1, 99 * 64 + 1 + np.arange(49)).tpot_s
    assert req.fill_end_s == pytest.approx(fill_s, abs=1e-9)
    assert req.decode_start_s == pytest.approx(fill_s + load_s, abs=1e-8)
    assert req.done_s == pytest.approx(fill_s + load_s + steps.sum(), abs=1e-7)
    # The decode worker streams the output: the first token reaches the user once the KV
    # has arrived and the call joins a decode batch, not at the fill's end.
    assert req.ttft_s == pytest.approx(fill_s + load_s, abs=1e-8)
    assert req.tpot_s == pytest.approx(steps.sum() / 49, rel=1e-6)
    # Per token, the client's gaps are the decode steps themselves: 49 tokens, each its
    # step's time (the run's percentiles are those of the priced steps, to 0.1%).
    gaps = rt.token_gaps.histogram()
    assert gaps.count == 49 and gaps.sums.sum() == pytest.approx(steps.sum(), rel=1e-9)
    for q in (50, 90, 99):
        want = float(np.percentile(steps, q, method="inverted_cdf"))
        assert gaps.percentile(q) == pytest.approx(want, rel=1e-3)
    parts = req.latency_breakdown_s
    assert parts["admission_wait"] == 0.0 and parts["decode_wait"] == pytest.approx(0, abs=1e-9)
    assert parts["fill"] == pytest.approx(fill_s, abs=1e-9)
    assert parts["transfer"] == pytest.approx(load_s, abs=1e-8)
    assert parts["decode"] == pytest.approx(steps.sum(), abs=1e-7)


def test_midfill_reuses_the_cached_prefix_and_computes_only_the_suffix():
    first = tuple(range(1, 100))
    turn1 = Request(1, "s1", 99 * 64, 10, first)
    turn2 = Request(2, "s1", 120 * 64, 20, first + tuple(range(100, 121)))
    rt = run([(0.0, "prefill-0", turn1), (60.0, "midfill-0", turn2)])
    assert turn2.prefix_tokens == 99 * 64 and turn2.computed_tokens == 21 * 64
    load_s = 99 * 64 * KV_PER_TOKEN / 200e9  # prefix from n0's DRAM into midfill HBM
    fill_s = predicted(Phase.MIDFILL, 1, 21 * 64, 99 * 64).step_time_s[0]
    assert turn2.fill_end_s == pytest.approx(60.0 + load_s + fill_s, abs=1e-8)
    assert rt.store.snapshot().moved_bytes  # bytes did move between tiers


def _decode_batch_run(jump):
    reqs = [Request(i, f"s{i}", 2000 + 500 * i, 300 + 97 * i, tuple(range(i * 1000, i * 1000 + 30)))
            for i in range(1, 7)]
    run([(0.5 * i, "prefill-0", r) for i, r in enumerate(reqs)], jump=jump)
    return np.array([r.done_s for r in reqs])


def test_decode_jump_matches_stepping_one_token_at_a_time():
    jumped, stepped = _decode_batch_run(True), _decode_batch_run(False)
    assert np.allclose(jumped, stepped, rtol=1e-3)
    assert np.max(np.abs(jumped - stepped) / stepped) < 1e-3


def test_same_inputs_same_timeline_event_for_event():
    def once():
        reqs = [Request(i, f"s{i % 3}", 1000 + 300 * i, 40 + 7 * i, tuple(range(i, i + 15)))
                for i in range(12)]
        subs = [(0.2 * i, "prefill-0" if i % 2 else "midfill-0", r) for i, r in enumerate(reqs)]
        return run(subs, keep_events=True).log.events

    a, b = once(), once()
    assert a == b and len(a) > 40


def _squeeze_run(jump=True):
    reqs = [Request(i, f"s{i}", 1500 + 250 * i, 1000 + 50 * i, tuple(range(i * 1000, i * 1000 + 30)))
            for i in range(8)]
    rt = run([(1.0 * i, "prefill-0", r) for i, r in enumerate(reqs)], jump=jump,
             decode_kv_tokens=8_000)
    return rt, reqs


def test_a_kv_squeeze_preempts_and_every_call_completes():
    """Each decode worker holds 8,000 tokens: calls are admitted on their current KV plus
    a growth reserve that shrinks as decode goes on; their KV grows as they generate until
    the worker must preempt the latest admitted."""
    rt, reqs = _squeeze_run()
    assert len(rt.done) == len(reqs) and all(r.remaining == 0 for r in reqs)
    preempted = [r for r in reqs if r.preemptions]
    assert preempted, "the squeeze should force a preemption"
    assert sum(w.preempted for w in rt.decode_workers.values()) == sum(
        r.preemptions for r in reqs)
    # A resumed call recomputes the KV of what it had generated (all but the fill's token).
    assert all(r.recomputed_tokens > 0 for r in preempted)
    assert sum(r.recomputed_tokens for r in reqs) == sum(
        w.recomputed_tokens for w in rt.decode_workers.values())
    # Every call's parts still add up to its end-to-end latency; its time in decode
    # batches leaves the waits out, its client TPOT (first token to last) does not.
    for r in reqs:
        assert sum(r.latency_breakdown_s.values()) == pytest.approx(r.done_s - r.arrival_s,
                                                                    abs=1e-9)
        assert r.decode_s_per_token * (r.output_tokens - 1) <= r.done_s - r.first_token_s + 1e-9
        assert r.tpot_s * (r.output_tokens - 1) == pytest.approx(r.done_s - r.first_token_s)
    out_of_batch = [(r.done_s - r.first_token_s - r.decode_s_per_token * (r.output_tokens - 1))
                    / r.preemptions for r in preempted]
    assert min(out_of_batch) > 1e-3  # a preempted call's time out of the batch
    # Per token, a stall is one gap (from the last token before it to the first after):
    # the gaps still add up to every call's first token to its last, and the largest is
    # at least a preempted call's mean stall.
    gaps = rt.token_gaps.histogram()
    assert gaps.count == pytest.approx(sum(r.output_tokens - 1 for r in reqs))
    assert gaps.sums.sum() == pytest.approx(sum(r.done_s - r.first_token_s for r in reqs),
                                            rel=1e-9)
    assert gaps.percentile(100) >= max(out_of_batch)


@pytest.mark.slow  # stepping one token at a time through ~8,000 steps takes ~3 s
def test_the_jump_stops_where_kv_would_overflow():
    """Stepping token by token and jumping to the overflow step preempt the same calls
    at the same steps: completion times agree to the jump's pricing tolerance."""
    (_, jumped), (_, stepped) = _squeeze_run(True), _squeeze_run(False)
    assert [r.preemptions for r in jumped] == [r.preemptions for r in stepped]
    assert np.allclose([r.done_s for r in jumped], [r.done_s for r in stepped], rtol=1e-3)


def test_breakdown_sums_to_end_to_end_latency_per_call():
    reqs = [Request(i, f"s{i % 3}", 1000 + 300 * i, 1 + 9 * (i % 4), tuple(range(i, i + 15)))
            for i in range(12)]
    run([(0.1 * i, "prefill-0" if i % 2 else "midfill-0", r) for i, r in enumerate(reqs)])
    for r in reqs:
        parts = r.latency_breakdown_s
        assert set(parts) == {"admission_wait", "fill", "transfer", "decode_wait", "decode"}
        assert min(parts.values()) >= 0
        assert sum(parts.values()) == pytest.approx(r.done_s - r.arrival_s, abs=1e-9)
        if r.output_tokens == 1:  # no decode step: the fill's end is the first token
            assert r.first_token_s == r.fill_end_s and parts["decode"] == 0
        else:
            assert r.first_token_s == r.decode_start_s > r.fill_end_s
