"""Chunked prefill in a fill worker, in virtual time: a long prompt runs in chunks of the
pool's token budget, each priced over the prefix before it; short requests share steps."""

import asyncio
import copy

import pytest

from costmodel.batch import batch_step_cost
from costmodel.hardware import HardwareTable, load_hardware
from costmodel.model import load_model
from costmodel.precision import Precision
from orchestrator.kit.scenario import KIT_CLUSTER
from workers.clock import VirtualClock
from workers.cluster_toml import cluster_from_dict
from workers.request import Request
from workers.runtime import ClusterRuntime

LLAMA = load_model("llama-3.1-70b")
H200 = HardwareTable((load_hardware("h200"),))
CHUNK = 4096


def step_s(new, cached):
    return batch_step_cost(LLAMA, H200, new, cached, tp=4, precision=Precision.BF16).step_time_s


def run(submissions):
    data = copy.deepcopy(KIT_CLUSTER)
    data["pools"][0]["max_batch_tokens"] = CHUNK

    async def main():
        rt = ClusterRuntime(cluster_from_dict(data, "kit").bind(LLAMA), block_tokens=64,
                            keep_events=True)
        rt.start()
        loop = asyncio.get_running_loop()
        for at_s, req in submissions:
            await asyncio.sleep(at_s - loop.time())
            req.arrival_s = loop.time()
            rt.submit_fill("prefill-0", req, loop.time())
        while len(rt.done) < len(submissions):
            await asyncio.sleep(0.5)
        await rt.stop()
        return rt

    return VirtualClock().run(main())


def test_a_long_prompt_fills_in_chunks_over_its_growing_prefix():
    req = Request(1, "s1", input_tokens=10_000, output_tokens=1)
    run([(0.0, req)])
    expected = step_s([4096], [0]) + step_s([4096], [4096]) + step_s([1808], [8192])
    assert req.fill_end_s == pytest.approx(expected, abs=1e-8)
    # Chunking costs more than one unchunked step would: the weights load three times.
    assert req.fill_end_s > step_s([10_000], [0])


def test_short_requests_share_the_last_chunks_step():
    long = Request(1, "s1", input_tokens=6_000, output_tokens=1)
    short = Request(2, "s2", input_tokens=1_000, output_tokens=1)
    rt = run([(0.0, long), (0.0, short)])
    first = step_s([4096], [0])
    second = step_s([1904, 1000], [4096, 0])
    assert long.fill_end_s == pytest.approx(first + second, abs=1e-8)
    assert short.fill_end_s == long.fill_end_s
    # The short request's fill starts with the second step, when the budget has room.
    assert short.fill_start_s == pytest.approx(first, abs=1e-8)
    starts = [e[3] for e in rt.log.events if e[2] == "fill_start"]
    assert starts == [(1,), (2,)]


class SlowSteps:
    """A step executor whose steps never end within the test (a remote worker, stuck)."""

    async def run(self, worker, duration_s, call_ids):
        await asyncio.sleep(1e6)


def test_an_evacuated_worker_hands_back_a_part_filled_call_once():
    from collections import Counter

    data = copy.deepcopy(KIT_CLUSTER)
    data["pools"][0]["max_batch_tokens"] = CHUNK

    async def main():
        rt = ClusterRuntime(cluster_from_dict(data, "kit").bind(LLAMA), block_tokens=64,
                            executor=SlowSteps())
        rt.start()
        long = Request(1, "s1", input_tokens=10_000, output_tokens=1)
        short = Request(2, "s2", input_tokens=500, output_tokens=1)
        for req in (long, short):
            rt.submit_fill("prefill-0", req, 0.0)
        await asyncio.sleep(5.0)  # several steps start; none ends
        out = rt.fill_workers["prefill-0"].evacuate()
        await rt.stop()
        return out

    out = VirtualClock().run(main())
    assert Counter(r.call_id for r in out) == Counter({1: 1, 2: 1})
    assert all(r.prefix_tokens == 0 and r.fill_start_s is None for r in out)


def test_with_pipeline_stages_the_next_chunk_starts_when_the_last_one_ends():
    """pp=2: a step's stage time is half its latency, so the worker plans again before
    the chunk in flight ends; the request comes back then and must wake the worker."""
    data = copy.deepcopy(KIT_CLUSTER)
    data["pools"][0].update(max_batch_tokens=CHUNK, pp=2, gpus=8)
    data["pools"][1]["nodes"] = ["n1"]
    data["pools"][2].update(gpus=4)
    data["pools"][1]["gpus"] = 4

    async def main():
        rt = ClusterRuntime(cluster_from_dict(data, "pp2").bind(LLAMA), block_tokens=64)
        rt.start()
        loop = asyncio.get_running_loop()
        req = Request(1, "s1", input_tokens=10_000, output_tokens=1)
        rt.submit_fill("prefill-0", req, 0.0)
        while not rt.done and loop.time() < 60.0:
            await asyncio.sleep(0.5)
        await rt.stop()
        return req

    req = VirtualClock().run(main())
    assert req.done_s is not None and req.done_s < 10.0
