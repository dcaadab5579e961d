"""Mixed (aggregated) workers in virtual time: prefill chunks ride in decode steps, a call's
KV stays on the worker from its fill to its decode, and a trace runs to completion on an
aggregated cluster as on a disaggregated one of the same GPUs."""

import asyncio
import copy

import numpy as np
import pytest

from costmodel.batch import batch_step_cost
from costmodel.hardware import HardwareTable, load_hardware
from costmodel.model import load_model
from costmodel.precision import Precision
from orchestrator.control.config import ControlConfig
from orchestrator.control.policies import make_policy
from orchestrator.kit.scenario import KIT_CLUSTER
from orchestrator.run.replay import Orchestrator
from tests.factories import short_agent_sessions, single_call_sessions
from traces.replay import LoadOptions
from workers.clock import VirtualClock
from workers.cluster_toml import cluster_from_dict
from workers.mixed import MixedWorker
from workers.request import Request
from workers.runtime import ClusterRuntime

LLAMA = load_model("llama-3.1-70b")
H200 = HardwareTable((load_hardware("h200"),))
CHUNK = 2048


def mixed_cluster(chunk=CHUNK, target_batch=8):
    """The kit's 16 H200 GPUs as four mixed TP4 workers."""
    data = copy.deepcopy(KIT_CLUSTER)
    data["pools"] = [{"name": "mixed", "phase": "mixed", "nodes": ["n0", "n1"], "gpus": 16,
                      "tp": 4, "precision": "bf16", "target_batch": target_batch,
                      "max_batch_sequences": target_batch, "max_batch_tokens": chunk}]
    return cluster_from_dict(data, "mixed.toml")


def step_s(new, cached, decoding=False):
    return batch_step_cost(LLAMA, H200, new, cached, decoding, tp=4,
                           precision=Precision.BF16).step_time_s


def run_worker(submissions, until_done):
    async def main():
        rt = ClusterRuntime(mixed_cluster().bind(LLAMA), block_tokens=64, keep_events=True)
        rt.start()
        loop = asyncio.get_running_loop()
        for at_s, req in submissions:
            await asyncio.sleep(at_s - loop.time())
            req.arrival_s = loop.time()
            rt.submit_fill("mixed-0", req, loop.time())
        while len(rt.done) < until_done:
            await asyncio.sleep(0.05)
        await rt.stop()
        return rt

    return VirtualClock().run(main())


def test_a_call_fills_in_chunks_then_decodes_on_the_same_worker_with_no_transfer():
    req = Request(1, "s1", input_tokens=5_000, output_tokens=3, block_ids=tuple(range(78)))
    rt = run_worker([(0.0, req)], 1)
    fill_s = step_s([2048], [0]) + step_s([2048], [2048]) + step_s([904], [4096])
    assert req.fill_end_s == pytest.approx(fill_s, abs=1e-8)
    # The fill's last chunk gives the first token; the call joins the batch at once.
    assert req.first_token_s == req.decode_start_s == req.fill_end_s
    parts = req.latency_breakdown_s
    assert parts["transfer"] == 0.0 and parts["decode_wait"] == 0.0
    assert req.fill_worker == req.decode_worker == "mixed-0"
    assert isinstance(rt.decode_workers["mixed-0"], MixedWorker)
    # Two decode steps, alone: the decode pricer's run at contexts 5001 and 5002.
    steps = rt.pricers["mixed"].decode_steps_s(1, 5_001, 2)
    assert req.done_s == pytest.approx(fill_s + steps.sum(), abs=1e-7)


def test_an_arrival_ends_a_decode_run_and_its_chunk_rides_with_the_decode():
    first = Request(1, "s1", input_tokens=1_000, output_tokens=400)
    second = Request(2, "s2", input_tokens=1_500, output_tokens=2)
    rt = run_worker([(0.0, first), (1.0, second)], 2)
    events = [(t / 1e9, kind, ids) for t, _, kind, ids in rt.log.events]
    start = next(t for t, kind, ids in events if kind == "fill_start" and ids == (2,))
    # The second call starts at the end of the decode step in progress at 1.0 s, not at
    # the first call's retirement.
    assert 1.0 <= start < 1.0 + 0.1 and start < first.done_s
    # The first call's decode run, from its fill's end: the second starts at a step end.
    ends = first.fill_end_s + np.cumsum(rt.pricers["mixed"].decode_steps_s(
        1, first.input_tokens + 1, first.output_tokens - 1))
    k = int(np.searchsorted(ends, 1.0)) + 1  # steps run by then
    assert start == pytest.approx(ends[k - 1], abs=1e-8)
    # Its fill is one step: its chunk beside the first call's decode token, priced together.
    context = first.input_tokens + 1 + k
    together = step_s([1500, 1], [0, context], [False, True])
    assert second.fill_end_s - start == pytest.approx(together, abs=1e-8)
    assert together > step_s([1500], [0])
    assert first.remaining == 0 and second.remaining == 0


def _replay(cluster, sessions, controller="buffered", pins=None):
    """The replay's result; `pins` (a list) receives the blobs still pinned in any worker's
    HBM once every call is done."""
    control = ControlConfig()
    target = next(p.batch.target_batch for p in cluster.pools)
    orch = Orchestrator(cluster.bind(LLAMA), sessions, make_policy(controller, control, target),
                        control, LoadOptions(think_scale=0.05), seed=0, deadline_s=3600.0)
    result = VirtualClock().run(orch.run())
    if pins is not None:
        store = orch.runtime.store
        pins.extend((loc, b) for loc, blobs in store.placement.at.items() for b in blobs
                    if store.pinned(b, loc))
    return result


@pytest.mark.parametrize("controller", ["buffered", "retire"])
def test_a_trace_completes_every_call_aggregated_and_disaggregated(controller):
    sessions = short_agent_sessions(3, 6, seed=2)
    calls = sum(len(s.calls) for s in sessions)
    pins: list = []
    agg = _replay(mixed_cluster(), sessions, controller, pins)
    assert pins == []  # every fill's and every decode's pin released
    disagg = _replay(cluster_from_dict(KIT_CLUSTER, "kit.toml"), sessions, controller)
    for result in (agg, disagg):
        assert result.counters["completed"] == calls and result.counters["rejected"] == 0
        assert result.gpus == 16
    # Aggregated: every call filled and decoded where it landed.
    assert all(r.fill_worker == r.decode_worker for r in agg.requests if r.output_tokens > 1)
    assert all(r.latency_breakdown_s["transfer"] == 0.0 for r in agg.requests)
    assert any(r.latency_breakdown_s["transfer"] > 0.0 for r in disagg.requests
               if r.output_tokens > 1)


def test_same_inputs_same_timeline():
    sessions = single_call_sessions(np.arange(12) * 0.2, input_tokens=3000, output_tokens=40)

    def once():
        result = _replay(mixed_cluster(chunk=1024, target_batch=4), sessions)
        return [(r.call_id, r.first_token_s, r.done_s) for r in result.requests]

    a, b = once(), once()
    assert a == b and len(a) == 12


def test_a_prefix_on_its_way_holds_no_step_its_chunk_rides_once_it_is_in_hbm():
    """A second turn's cached prefix loads from host memory while the worker goes on
    decoding; its chunk joins the first step after the load, priced without the load."""
    turn1 = Request(1, "s", 3_000, 2, block_ids=tuple(range(100, 146)))
    first = Request(2, "a", 1_000, 3_000)
    turn2 = Request(3, "s", 4_000, 2, block_ids=tuple(range(100, 162)))
    rt = run_worker([(0.0, turn1), (1.0, first), (5.0, turn2)], 3)
    assert turn2.prefix_tokens == 46 * 64
    ends = first.fill_end_s + np.cumsum(rt.pricers["mixed"].decode_steps_s(1, 1_001, 2_999))
    arrived_s = ends[np.searchsorted(ends, 5.0)]  # the run is cut at that step's end
    began_s = next(t / 1e9 for t, _, kind, ids in rt.log.events
                   if kind == "fill_start" and ids == (3,))
    assert began_s > arrived_s + 1e-6  # the load took time; decode steps went on meanwhile
    j = int(np.searchsorted(ends, began_s - 1e-9))
    assert began_s == pytest.approx(ends[j], abs=1e-8)  # at a decode step's end
    step = step_s([4_000 - 46 * 64, 1], [46 * 64, 1_001 + j + 1], [False, True])
    assert turn2.fill_end_s - began_s == pytest.approx(step, abs=1e-8)
    assert turn2.fill_start_s == pytest.approx(arrived_s, abs=1e-8)  # its fill began with the load


def test_state_is_handed_out_again_until_its_queue_or_its_decode_side_changes():
    async def main():
        rt = ClusterRuntime(mixed_cluster().bind(LLAMA), block_tokens=64)
        worker = rt.decode_workers["mixed-0"]
        first = worker.state()
        assert worker.state() is first and first.phase == "mixed" and first.queue_depth == 0
        worker.submit(Request(1, "s1", input_tokens=1_000, output_tokens=2), 0.0)
        queued = worker.state()
        assert queued is not first and queued.queue_depth == 1 and queued.running == 0
        assert worker.state() is queued
        # Down: the pool's target is its cap (max_batch_sequences), which holds a raise.
        worker.set_target_batch(first.target_batch - 1)
        retargeted = worker.state()
        assert retargeted.target_batch == first.target_batch - 1
        assert retargeted.queue_depth == 1 and retargeted.phase == "mixed"

    VirtualClock().run(main())


def test_an_arrival_marks_the_decode_run_for_replanning_and_wakes_it():
    async def main():
        rt = ClusterRuntime(mixed_cluster().bind(LLAMA), block_tokens=64)
        worker = rt.decode_workers["mixed-0"]
        loop = asyncio.get_running_loop()
        worker._interrupt = asyncio.Event()
        ends = [1.0, 2.0, 3.0]  # a run of three steps, from 0
        wait = worker._wait.until(loop, ends, worker._interrupt.is_set())
        assert not worker._replan and not wait.done()
        await asyncio.sleep(1.5)
        worker.submit(Request(1, "s1", input_tokens=1_000, output_tokens=2), loop.time())
        # A poke: the run is to stop (replan) at the end of its step in progress, the
        # second; the wait ends there, not before, and a second poke changes nothing.
        assert worker._replan and not wait.done()
        worker.set_target_batch(worker.target_batch)
        await asyncio.sleep(0.49)
        assert not wait.done()
        assert await wait == 1 and loop.time() == 2.0
        assert not worker._wait.armed
        # Poked already, at a step's end: the wait is over at once, at that step.
        assert worker._interrupt.is_set()
        assert worker._wait.until(loop, [2.0, 3.0], worker._interrupt.is_set()).result() == 0
        # No poke: None at the run's end.
        worker._interrupt.clear()
        wait = worker._wait.until(loop, [2.5, 3.0], worker._interrupt.is_set())
        assert await wait is None and loop.time() == 3.0 and not worker._wait.armed

    VirtualClock().run(main())


def test_calls_arriving_together_fill_together_up_to_the_batch():
    """A call whose prefix this plan fetched counts once against the batch, not twice
    (as loading and as starting): two short calls on a worker of two slots start in one step."""
    reqs = [Request(i, f"s{i}", input_tokens=500, output_tokens=2, block_ids=tuple(range(7)))
            for i in (1, 2)]

    async def main():
        rt = ClusterRuntime(mixed_cluster(target_batch=2).bind(LLAMA), block_tokens=64,
                            keep_events=True)
        rt.start()
        for req in reqs:
            req.arrival_s = 0.0
            rt.submit_fill("mixed-0", req, 0.0)
        while len(rt.done) < 2:
            await asyncio.sleep(0.05)
        await rt.stop()

    VirtualClock().run(main())
    assert reqs[0].fill_start_s == reqs[1].fill_start_s == 0.0
    assert reqs[0].fill_end_s == reqs[1].fill_end_s


@pytest.mark.parametrize("overflow", [False, True])
def test_a_mixed_step_plans_and_preempts_as_a_decode_run_plan_does(overflow):
    """A mixed step's plan (`_plan_step`: one step, no run horizon) preempts the same
    sequences as the decode run's (`_plan_run`) from the same state, and returns the
    kept sequences' context tokens."""
    from workers.kv_io import FetchResult

    async def main():
        rt = ClusterRuntime(mixed_cluster().bind(LLAMA), block_tokens=64)
        step, run = rt.decode_workers["mixed-0"], rt.decode_workers["mixed-1"]
        share = step.kv.kv_capacity_tokens // (3 if overflow else 8)
        for worker in (step, run):
            worker.running = [Request(i, f"s{i}", input_tokens=share + 100 * i,
                                      output_tokens=50) for i in range(4)]
            for req in worker.running:
                req.generated = 1
                worker._fetches[req.call_id] = FetchResult(req.input_tokens, 0, 0.0, ())
        contexts = step._plan_step(0.0)
        run._plan_run(0.0)
        kept = [r.call_id for r in step.running]
        assert kept == [r.call_id for r in run.running] == ([0, 1] if overflow else [0, 1, 2, 3])
        assert contexts == [r.context_tokens for r in step.running]
        assert step.preempted == run.preempted == (2 if overflow else 0)
        assert ([r.call_id for r in step.ready.peek()]
                == [r.call_id for r in run.ready.peek()])
        assert step._reserve.tokens() == run._reserve.tokens()
        assert not step._replan and not run._replan

    VirtualClock().run(main())
