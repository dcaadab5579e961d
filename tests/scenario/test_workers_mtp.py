"""Multi-token prediction in decode: drawn tokens per step from the run's seed, steps
priced as steps, and the same KV rules as one token a step."""

import asyncio
import copy
import dataclasses

import numpy as np
import pytest

from costmodel.capacity import kv_capacity
from costmodel.hardware import load_hardware
from costmodel.layout import Layout
from costmodel.model import load_model
from costmodel.mtp import expected_tokens_per_step
from tests.factories import SMALL
from workers.clock import VirtualClock
from workers.cluster_toml import cluster_from_dict
from workers.decode_mtp import plan_mtp_run
from workers.kv_budget import GrowthReserve, steps_that_fit, steps_until_admissible
from workers.request import Request
from workers.runtime import ClusterRuntime

LLAMA = load_model("llama-3.1-70b")


def _decode_one(mtp, seed, output_tokens=400):
    data = copy.deepcopy(SMALL)
    data["pools"][2]["mtp"] = mtp
    bound = cluster_from_dict(data, "small.toml").bind(LLAMA)

    async def main():
        rt = ClusterRuntime(bound, 64, seed=seed, keep_events=True)
        rt.start()
        req = Request(1, "s", 99 * 64, output_tokens, tuple(range(1, 100)))
        rt.submit_fill("prefill-0", req, 0.0)
        while not rt.done:
            await asyncio.sleep(0.5)
        await rt.stop()
        return req, rt

    return VirtualClock().run(main())


def test_mtp_draws_are_seeded_and_steps_yield_the_expected_tokens():
    a, rt = _decode_one(1, seed=0)
    b, _ = _decode_one(1, seed=0)
    c, _ = _decode_one(1, seed=1)
    assert a.done_s == b.done_s and a.done_s != c.done_s
    assert a.remaining == 0 and a.generated == a.output_tokens
    # Decode time over the priced step time gives the steps run; the tokens they yielded
    # per step are the acceptance distribution's mean (1.85 with one draft).
    pricer = rt.pricers["decode"]
    step_s = float(pricer.decode_step_times_s(1, [a.input_tokens + 200])[0])
    steps = a.latency_breakdown_s["decode"] / step_s
    per_step = (a.output_tokens - 1) / steps
    assert per_step == pytest.approx(float(expected_tokens_per_step(1)), abs=0.15)
    plain, _ = _decode_one(0, seed=0)
    assert a.tpot_s < plain.tpot_s / 1.5  # a step costs about the same, yields ~1.85 tokens
    # Per token, a step's time is shared by the tokens it yields (SGLang's bench_serving
    # divides a chunk's gap by its tokens): the gaps count every token after the first
    # and add up to the first token to the last.
    gaps = rt.token_gaps.histogram()
    assert gaps.count == a.output_tokens - 1
    assert gaps.sums.sum() == pytest.approx(a.done_s - a.first_token_s, rel=1e-9)
    assert gaps.percentile(50) < step_s  # tokens of steps that accepted a draft: step / 2


def test_all_ones_draws_plan_like_one_token_steps():
    kv = kv_capacity(LLAMA, load_hardware("h200"), Layout(tp=4))
    kv = dataclasses.replace(kv, budget_bytes_per_gpu=15_000 * kv.kv_bytes_per_token_per_gpu)
    contexts = np.array([4000.0, 3000.0, 5000.0])
    remaining = np.array([900.0, 700.0, 800.0])
    ones = np.ones((600, 3), dtype=np.int64)
    run = plan_mtp_run(kv, GrowthReserve(), ones, contexts, remaining, 0.0)
    assert run.steps == min(700, steps_that_fit(kv, contexts, 0.0, 600))
    assert np.array_equal(run.gained[-1], np.full(3, run.steps))
    reserve = GrowthReserve(0.6)
    admit = (np.zeros(0), 1000.0)
    run = plan_mtp_run(kv, reserve, ones, contexts - 1500, remaining, 0.0, admit)
    want = steps_until_admissible(kv, reserve, contexts - 1500, np.zeros(0), 1000.0, 600)
    assert want > 1 and run.steps == want


def test_a_kv_squeeze_with_mtp_preempts_and_completes_every_call():
    from tests.scenario.test_workers_flow import squeezed

    data = copy.deepcopy(SMALL)
    data["pools"][2]["mtp"] = 2
    bound = squeezed(cluster_from_dict(data, "small.toml").bind(LLAMA), 8_000)
    reqs = [Request(i, f"s{i}", 1500 + 250 * i, 2500 + 50 * i,
                    tuple(range(i * 1000, i * 1000 + 30))) for i in range(8)]

    async def main():
        rt = ClusterRuntime(bound, 64, seed=5)
        rt.start()
        loop = asyncio.get_running_loop()
        for i, r in enumerate(reqs):
            await asyncio.sleep(1.0 * i - loop.time())
            r.arrival_s = loop.time()
            rt.submit_fill("prefill-0", r, loop.time())
        while len(rt.done) < len(reqs):
            await asyncio.sleep(0.5)
        await rt.stop()

    VirtualClock().run(main())
    assert all(r.remaining == 0 and r.generated == r.output_tokens for r in reqs)
    assert any(r.preemptions for r in reqs)
    for r in reqs:
        assert sum(r.latency_breakdown_s.values()) == pytest.approx(r.done_s - r.arrival_s,
                                                                    abs=1e-9)
