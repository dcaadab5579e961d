"""A request through prefill -> a decode pool whose routed experts sit on a decode-experts
pool, in virtual time: decode ends exactly when the split pricing says."""

import asyncio

import numpy as np
import pytest

from costmodel.disagg import af_decode_times
from costmodel.hardware import HardwareTable, load_hardware
from costmodel.model import load_model
from costmodel.phase import Configs, Phase, phase_cost, step_times
from costmodel.precision import Precision
from tests.unit.test_workers_disagg import split_cluster
from workers.clock import VirtualClock
from workers.request import Request
from workers.runtime import ClusterRuntime

K3 = load_model("kimi-k3-like")
GB200 = load_hardware("gb200")
FP4 = int(Precision.FP4)


def run(cluster, submissions):
    async def main():
        rt = ClusterRuntime(cluster.bind(K3), block_tokens=64)
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


def decode_configs(contexts):
    # One sequence on a TP8 attention instance (one DP rank).
    return Configs.make(phase=int(Phase.DECODE), batch=1, new_tokens=1, context=contexts,
                        tp=8, ep=1, precision=FP4)


@pytest.mark.parametrize(("experts_nodes", "same_domain"), [(["nvl0"], True), (["nvl1"], False)])
def test_prefill_then_split_decode_completes_when_the_split_pricing_says(experts_nodes,
                                                                         same_domain):
    req = Request(1, "s1", input_tokens=99 * 64, output_tokens=50, block_ids=tuple(range(1, 100)))
    rt = run(split_cluster(experts={"nodes": experts_nodes}), [(0.0, "prefill-0", req)])
    # Prefill: TP4 x EP16 gives 4 attention ranks; the one prompt fills on one of them,
    # the routed experts seeing its tokens alone, in chunks of its rank's share of the
    # step's 16,384 tokens (4,096: 6,336 = 4,096 + 2,240).
    fill_s = sum(phase_cost(K3, HardwareTable((GB200,)), Configs.make(
        phase=int(Phase.PREFILL), batch=1, new_tokens=new, context=cached, tp=4, ep=16,
        precision=FP4, group_sequences=1)).step_time_s[0]
        for new, cached in ((4096, 0), (2240, 4096)))
    assert req.fill_end_s == pytest.approx(fill_s, abs=1e-9)
    assert req.decode_worker in ("decode-0", "decode-1")
    # 49 more tokens at contexts 6337..6385; the expert instance serves two attention
    # instances, each priced as carrying the same batch.
    contexts = 99 * 64 + 1 + np.arange(49)
    _, tpot_s, _ = af_decode_times(K3, HardwareTable((GB200, GB200)), decode_configs(contexts),
                                   1, 16, FP4, same_domain=same_domain, attention_instances=2)
    assert req.decode_start_s > req.fill_end_s  # the KV load
    assert req.done_s == pytest.approx(req.decode_start_s + tpot_s.sum(), abs=1e-7)
    # A colocated pricing of the same attention layout would have said otherwise.
    _, colocated = step_times(K3, HardwareTable((GB200,)), decode_configs(contexts))
    assert abs(colocated.sum() - tpot_s.sum()) > 1e-3
    assert not rt.fill_workers_of(Phase.DECODE)  # the expert pool runs no task of its own

