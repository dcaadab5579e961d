"""Decode pools whose routed experts live on a `decode-experts` pool: parsing, pairing,
binding and the worker's step pricing."""

import copy

import numpy as np
import pytest

from costmodel.disagg import AFLayout, af_decode_times
from costmodel.hardware import HardwareTable, load_hardware
from costmodel.model import load_model
from costmodel.precision import Precision
from workers.cluster import ClusterError
from workers.cluster_toml import cluster_from_dict
from workers.pricing import StepPricer

K3 = load_model("kimi-k3-like")
GB200 = load_hardware("gb200")

SPLIT = {
    "name": "split",
    "pfs": {"capacity_gb": 100_000, "read_gb_per_s": 400, "write_gb_per_s": 200},
    "racks": [{"name": "r0"}, {"name": "r1"}],
    "nodes": [
        {"name": "nvl0", "rack": "r0", "hardware": "gb200", "gpus": 72, "dram_gb": 17_280,
         "dram_gb_per_s": 18_432},
        {"name": "nvl1", "rack": "r1", "hardware": "gb200", "gpus": 72, "dram_gb": 17_280,
         "dram_gb_per_s": 18_432},
    ],
    "pools": [
        {"name": "prefill", "phase": "prefill", "nodes": ["nvl0"], "gpus": 16, "tp": 4,
         "ep": 16, "precision": "fp4"},
        {"name": "decode", "phase": "decode", "nodes": ["nvl0"], "gpus": 16, "tp": 8,
         "precision": "fp4", "experts_pool": "experts", "target_batch": 2},
        {"name": "experts", "phase": "decode-experts", "nodes": ["nvl0"], "gpus": 16,
         "ep": 16, "precision": "fp4"},
    ],
}


def split_cluster(**pool_changes):
    """SPLIT with changes to pools by name: {"decode": {"gpus": 24}, ...}."""
    data = copy.deepcopy(SPLIT)
    for pool in data["pools"]:
        pool.update(pool_changes.get(pool["name"], {}))
    return cluster_from_dict(data, "split.toml")


def test_a_decode_pool_pairs_its_workers_with_the_expert_pool():
    bound = split_cluster().bind(K3)
    decode = [w for w in bound.workers if w.pool == "decode"]
    assert [w.experts_worker for w in decode] == ["experts-0", "experts-0"]
    (ew,) = bound.expert_workers
    assert ew.attention_workers == ("decode-0", "decode-1") and ew.node == "nvl0"
    lay = decode[0].layout
    assert isinstance(lay, AFLayout)
    assert (lay.experts_ep, lay.attention_per_expert, lay.same_domain) == (16, 2, True)
    assert lay.experts_weights is Precision.FP4
    # No routed expert on the attention GPUs: almost all their HBM holds KV (MLA's latent
    # is whole on each of the 8 TP ranks, so the instance holds one GPU's worth of it).
    assert decode[0].kv.budget_bytes_per_gpu > 0.8 * GB200.hbm_bytes
    assert decode[0].kv_capacity_bytes > 0.8 * GB200.hbm_bytes
    assert bound.spec.gpus == 48
    assert all(w.pool != "experts" for w in bound.workers)  # no queue, no worker task


def test_experts_on_another_rack_are_reached_over_scale_out():
    bound = split_cluster(experts={"nodes": ["nvl1"]}).bind(K3)
    assert not bound.workers[-1].layout.same_domain


def test_n_to_1_pairing_and_the_worker_prices_with_the_split():
    bound = split_cluster(decode={"gpus": 32},
                          experts={"gpus": 32, "nodes": ["nvl0", "nvl1"]}).bind(K3)
    assert [w.experts_worker for w in bound.workers if w.pool == "decode"] == [
        "experts-0", "experts-0", "experts-1", "experts-1"]
    assert [e.node for e in bound.expert_workers] == ["nvl0", "nvl1"]
    w = bound.workers[-1]
    assert not w.layout.same_domain  # one group spans two racks: the pool prices scale-out
    pricer = StepPricer(K3, w.hardware, w.layout)
    got = pricer.decode_steps_s(3, 50_000.0, 4)
    cfg = pricer._configs(2, 3, 1, 50_000.0 + np.arange(4))
    _, want, _ = af_decode_times(K3, HardwareTable((GB200, GB200)), cfg, 1, 16,
                                 int(Precision.FP4), pricer.eff, False, 2)
    assert np.array_equal(got, want)


@pytest.mark.parametrize(("changes", "message"), [
    ({"decode": {"experts_pool": "nope"}},
     r"pools\[1\]\.experts_pool: no decode-experts pool named 'nope'; known: experts"),
    ({"prefill": {"experts_pool": "experts"}},
     r"pools\[0\]\.experts_pool: only a decode pool has one, not prefill"),
    ({"decode": {"pp": 2}}, r"pools\[1\]\.pp: a decode pool with experts_pool has one stage"),
    ({"decode": {"gpus": 24}, "experts": {"gpus": 32}},
     r"pools\[1\]\.experts_pool: the 3 workers of pool decode do not pair evenly with the 2 "),
    ({"decode": {"experts_pool": None}}, "pools\\[2\\]: decode-experts pool experts is no "),
    ({"experts": {"tp": 4}}, r"pools\[2\]\.tp: a decode-experts pool has none"),
    ({"experts": {"gpus": 20}}, r"pools\[2\]\.gpus: 20 is not a multiple of ep=16"),
    ({"experts": {"name": "decode"}}, "pool names must be unique"),
    ({"decode": {"phase": "decode-attention"}},
     r"phase: expected prefill, midfill or decode \(or decode-experts\)"),
])
def test_bad_split_descriptions_name_the_field(changes, message):
    data = copy.deepcopy(SPLIT)
    for pool in data["pools"]:
        for key, value in changes.get(pool["name"], {}).items():
            if value is None:
                pool.pop(key)
            else:
                pool[key] = value
    with pytest.raises(ClusterError, match=message):
        cluster_from_dict(data, "split.toml")


def test_an_expert_slice_too_big_for_hbm_is_refused_at_bind_naming_ep():
    cluster = split_cluster(experts={"gpus": 4, "ep": 4}, decode={"gpus": 8})
    with pytest.raises(ClusterError, match=r"pool experts\.ep: ep=4 puts .* GB of routed "
                                           r"experts on each GPU > 186\.0 GB HBM of gb200"):
        cluster.bind(K3)


def test_a_split_pool_needs_a_model_with_routed_experts():
    with pytest.raises(ClusterError, match="pool decode .*no routed experts"):
        split_cluster(decode={"precision": "bf16"},
                      prefill={"precision": "bf16", "ep": 1}).bind(
            load_model("llama-3.1-70b"))
