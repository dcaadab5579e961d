"""`max_batch_sequences` caps a decode or mixed worker per attention rank, as engines count
their running requests (docs/cluster-format.md): a worker of `ranks` DP-attention ranks
holds at most ranks x max_batch_sequences sequences, whatever target a controller sets."""

import asyncio
import copy

import pytest

from costmodel.model import load_model
from orchestrator.kit.scenario import KIT_CLUSTER
from workers.clock import VirtualClock
from workers.cluster import ClusterError
from workers.cluster_toml import cluster_from_dict
from workers.request import Request
from workers.runtime import ClusterRuntime

DSV3 = load_model("deepseek-v3")
RANKS = 8  # TP1 EP8: eight attention ranks a worker
PER_RANK_TARGET, PER_RANK_CAP = 1, 2
CALLS = 40  # more than the cap, all at once


def cluster(phase):
    """DeepSeek-V3 on the kit's H200 nodes: one worker of TP1 EP8, decode (beside a TP8
    prefill worker) or mixed."""
    data = copy.deepcopy(KIT_CLUSTER)
    capped = {"name": phase, "phase": phase, "nodes": ["n1"], "gpus": 8, "tp": 1, "ep": RANKS,
              "precision": "fp8", "mtp": 0, "target_batch": PER_RANK_TARGET,
              "max_batch_sequences": PER_RANK_CAP, "max_batch_tokens": 8192}
    prefill = {"name": "prefill", "phase": "prefill", "nodes": ["n0"], "gpus": 8, "tp": 8,
               "precision": "fp8"}
    data["pools"] = [capped] if phase == "mixed" else [prefill, capped]
    return cluster_from_dict(data, f"{phase}.toml").bind(DSV3)


def most_held(phase, target_batch):
    """Run CALLS calls arriving together; the most sequences the capped worker held at
    once (loading, filling or decoding), its `max_sequences` and its target batch."""
    async def main():
        rt = ClusterRuntime(cluster(phase), block_tokens=64, keep_events=True)
        worker = rt.decode_workers[f"{phase}-0"]
        worker.set_target_batch(target_batch)  # as a controller would
        rt.start()
        loop = asyncio.get_running_loop()
        entry = "mixed-0" if phase == "mixed" else "prefill-0"
        for i in range(CALLS):
            req = Request(i, f"s{i}", input_tokens=1024, output_tokens=64)
            req.arrival_s = loop.time()
            rt.submit_fill(entry, req, loop.time())
        while len(rt.done) < CALLS:
            await asyncio.sleep(0.05)
        await rt.stop()
        return rt, worker

    rt, worker = VirtualClock().run(main())
    enters = "fill_start" if phase == "mixed" else "load"
    held = most = 0
    for _, name, kind, ids in rt.log.events:
        if name != f"{phase}-0":
            continue
        held += len(ids) if kind == enters else -len(ids) if kind == "done" else 0
        most = max(most, held)
    assert all(r.remaining == 0 for r in rt.done) and len(rt.done) == CALLS
    return most, worker.max_sequences, worker.target_batch


@pytest.mark.parametrize("phase", ["decode", "mixed"])
def test_a_target_above_the_cap_holds_the_cap_per_rank(phase):
    """A target of 1,000 gives the worker its cap, 2 per rank x 8 ranks = 16 sequences held
    together: not the 2 of a per-worker reading, nor the 40 the calls would fill."""
    most, cap, target = most_held(phase, 1000)
    assert cap == PER_RANK_CAP * RANKS == 16 and target == 16
    assert most == 16


@pytest.mark.parametrize("phase", ["decode", "mixed"])
def test_the_pools_target_is_per_rank_below_the_cap(phase):
    most, cap, target = most_held(phase, PER_RANK_TARGET * RANKS)
    assert (cap, target, most) == (16, 8, 8)


def test_a_target_above_the_cap_is_refused_in_the_file():
    data = copy.deepcopy(KIT_CLUSTER)
    data["pools"][2] = {**data["pools"][2], "target_batch": 4, "max_batch_sequences": 2}
    with pytest.raises(ClusterError, match=r"target_batch: 4 is more than max_batch_sequences=2"):
        cluster_from_dict(data, "bad.toml")
