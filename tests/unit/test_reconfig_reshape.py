"""The slow loop moves a worker to a pool whose workers have another size, reshaped."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from types import SimpleNamespace

import pytest

from costmodel.memory import weight_bytes_per_gpu
from costmodel.model import load_model
from orchestrator.control.realloc import Move
from orchestrator.run.reconfig import RESHAPE_CONTEXT_TOKENS, Reconfigurer
from storage.store import BlobStore
from storage.tiers import Location, Tier
from workers.cluster import reshaped_worker
from workers.cluster_toml import load_cluster


@pytest.fixture(scope="module")
def bound():
    return load_cluster("gb200-nvl72x1").bind(load_model("kimi-k3-like"))


def _template(bound, pool):
    return next(w for w in bound.workers if w.pool == pool)


class _Worker:
    def __init__(self, spec):
        self.spec, self.name, self.accepting = spec, spec.name, True
        self.hbm = Location(Tier.HBM, spec.name)

    def state(self):
        return SimpleNamespace(queue_depth=0, running=0, busy_s=0.0)


class _Runtime:
    """What the reconfigurer touches of a ClusterRuntime; records the pricer each new
    worker would be given (None: the runtime builds one at the worker's own layout)."""

    def __init__(self, bound):
        self.fill_workers = {w.name: _Worker(w) for w in bound.workers if w.pool != "decode"}
        self.decode_workers = {w.name: _Worker(w) for w in bound.workers if w.pool == "decode"}
        self.pricers = {w.pool: f"pricer of {w.pool}" for w in bound.workers}
        self.eff = SimpleNamespace(idle_power_fraction=0.3)
        self.store = BlobStore(bound.store_layout, 64, 1)
        self.added = []

    def remove_worker(self, name):
        self.fill_workers.pop(name, None) or self.decode_workers.pop(name)

    def add_worker(self, spec, hbm_holder=None):
        self.added.append((spec, hbm_holder, self.pricers.get(spec.pool)))


def _reconfigurer(bound):
    weights = {w.pool: float(weight_bytes_per_gpu(bound.model, w.layout)) for w in bound.workers}
    return Reconfigurer(_Runtime(bound), bound, weights)


def test_midfill_worker_reshapes_to_a_12_gpu_decode_worker(bound):
    rc = _reconfigurer(bound)
    decode, midfill = _template(bound, "decode"), _template(bound, "midfill")
    assert decode.layout.instance_gpus == 32 and midfill.layout.instance_gpus == 12
    spec = rc.reshaped(decode, midfill)
    assert spec is not None
    assert (spec.layout.pp, spec.layout.tp, spec.layout.ep) == (1, 1, 12)
    assert spec.layout.instance_gpus == 12
    assert spec.batch == decode.batch and spec.layout.weights == decode.layout.weights
    assert spec.layout.mtp == decode.layout.mtp and spec.layout.kv == decode.layout.kv
    assert 0 < spec.kv.kv_capacity_tokens < decode.kv.kv_capacity_tokens
    assert spec.kv_capacity_bytes > 0
    assert spec.kv.sequences_at(RESHAPE_CONTEXT_TOKENS) >= decode.batch.target_batch * 12
    # The load reads the 12-GPU slice, larger per GPU than the 32-GPU pool's.
    sliced = float(weight_bytes_per_gpu(bound.model, spec.layout))
    assert sliced > rc.weights_per_gpu["decode"]
    per_gpu = min(spec.hardware.scale_out_bytes_per_s, bound.spec.pfs.read_bytes_per_s / 12)
    assert rc.load_time_s(spec) == pytest.approx(sliced / per_gpu)


def test_move_runs_the_reshaped_worker_at_its_own_layout(bound):
    rc = _reconfigurer(bound)
    rc.load_time_s = lambda spec: 0.0  # the load's duration is not what is tested here

    async def run():
        assert rc.start(Move("midfill", "decode"), 0.0)
        await asyncio.gather(*rc._tasks)

    asyncio.run(run())
    [(spec, holder, pool_pricer)] = rc.runtime.added
    assert spec.pool == "decode" and spec.name == "decode-1"
    assert spec.layout.instance_gpus == 12 and holder.startswith("midfill-")
    assert pool_pricer is None  # not the 32-GPU pool's pricer
    assert rc.runtime.pricers["decode"] == "pricer of decode"  # restored for the pool
    assert rc.log[0][2:] == ("midfill", "decode")
    hbm = Location(Tier.HBM, holder)
    assert rc.runtime.store.placement.capacity_bytes[hbm] == spec.kv_capacity_bytes


def test_reshape_whose_weights_do_not_fit_is_refused(bound):
    decode = _template(bound, "decode")
    assert reshaped_worker(bound, decode, 8, decode.hardware) is None
    rc = _reconfigurer(bound)
    small = reshaped_worker(bound, _template(bound, "midfill"), 12, decode.hardware)
    tiny = replace(small, layout=replace(small.layout, ep=8))  # an 8-GPU donor
    assert tiny.layout.instance_gpus == 8
    assert rc.reshaped(decode, tiny) is None


def test_move_refused_when_no_donor_can_be_reshaped(bound, monkeypatch):
    rc = _reconfigurer(bound)
    monkeypatch.setattr(rc, "reshaped", lambda target, donor: None)

    async def run():
        return rc.start(Move("midfill", "decode"), 0.0)

    assert asyncio.run(run()) is False
    assert all(w.accepting for w in rc.runtime.fill_workers.values())


def test_a_move_that_fails_reaches_the_loops_exception_handler(bound):
    rc = _reconfigurer(bound)

    def broken(spec):
        raise RuntimeError("no weights")

    rc.load_time_s = broken
    seen = []

    async def run():
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: seen.append(ctx))
        assert rc.start(Move("midfill", "decode"), 0.0)
        await asyncio.gather(*rc._tasks, return_exceptions=True)
        await asyncio.sleep(0)  # done callbacks run after the task ends

    asyncio.run(run())
    assert [str(c["exception"]) for c in seen] == ["no weights"]
