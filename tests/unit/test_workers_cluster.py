import copy

import pytest

from costmodel.model import load_model
from tests.factories import SMALL, small_cluster
from workers.cluster import KV_SHARE_OF_FREE_HBM, ClusterError, cluster_from_dict, load_cluster

LLAMA = load_model("llama-3.1-70b")


def _with(path, value):
    data = copy.deepcopy(SMALL)
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


def test_small_cluster_builds_workers_and_tiers():
    bound = small_cluster().bind(LLAMA)
    names = [w.name for w in bound.workers]
    assert names == ["prefill-0", "midfill-0", "decode-0", "decode-1"]
    assert {w.node for w in bound.workers if w.pool == "decode"} == {"n1"}
    hbm_free = 141e9 - 70.55e9 * 2 / 4  # BF16 weights over TP4 (embeddings included)
    assert bound.workers[0].kv_capacity_bytes == pytest.approx(
        KV_SHARE_OF_FREE_HBM * hbm_free * 4, rel=0.01)
    assert len(bound.store_layout.all_locations()) == 1 + 1 + 2 + 4


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("pools", 0, "gpus"), 6, r"pools\[0\].gpus: 6 is not a multiple of the layout's 4 GPUs"),
        (("pfs", "capacity_gb"), 0, r"pfs.capacity_gb: expected > 0, got 0"),
        (("pfs", "read_gb_per_s"), -5, r"pfs.read_gb_per_s: expected > 0, got -5"),
        (("nodes", 0, "dram_gb"), "big", r"nodes\[0\].dram_gb: expected a number, got 'big'"),
        (("pools", 2, "phase"), "verify", r"pools\[2\].phase: expected prefill, midfill or decode"),
        (("nodes", 0, "hardware"), "tpu", r"nodes\[0\].hardware: unknown hardware 'tpu'"),
        (("pools", 0, "nodes"), ["n9"], r"pools\[0\].nodes: unknown node 'n9'"),
    ],
)
def test_bad_cluster_descriptions_name_field_and_value(path, value, message):
    data = _with(path, value)
    with pytest.raises(ClusterError, match=message):
        cluster_from_dict(data, "small.toml").bind(LLAMA)


def test_slice_that_does_not_fit_hbm_is_refused():
    data = _with(("pools", 0, "tp"), 1)
    data["pools"][0]["gpus"] = 1
    with pytest.raises(ClusterError, match=r"pool prefill: the model slice does not fit: 141.1 GB"):
        cluster_from_dict(data, "small.toml").bind(LLAMA)


def test_tp_not_dividing_heads_names_the_pool():
    data = _with(("pools", 0, "tp"), 3)
    data["pools"][0]["gpus"] = 3
    with pytest.raises(ClusterError, match="pool prefill: tp=3 does not divide the 64"):
        cluster_from_dict(data, "small.toml").bind(LLAMA)


def test_pools_asking_for_more_gpus_than_nodes_have():
    with pytest.raises(ClusterError, match="pools ask for 24 GPUs, nodes have 16"):
        cluster_from_dict(_with(("pools", 2, "gpus"), 16), "small.toml")
    data = _with(("pools", 2, "nodes"), ["n0"])
    with pytest.raises(ClusterError, match="pool decode: worker 0 needs 4 GPUs on one node"):
        cluster_from_dict(data, "small.toml").bind(LLAMA)


def test_cluster_file_errors(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text("name = [")
    with pytest.raises(ClusterError, match="invalid TOML"):
        load_cluster(str(bad))
    with pytest.raises(ClusterError, match="unknown cluster 'nope'"):
        load_cluster("nope")


def test_presets_bind_the_default_model():
    from workers.cluster import cluster_names

    k3 = load_model("kimi-k3-like")
    assert {"gb200-nvl72x1", "gb200-nvl72x2", "b200x8", "b300x8"} <= set(cluster_names())
    for name in cluster_names():
        bound = load_cluster(name).bind(k3)
        phases = {w.phase.name for w in bound.workers}
        assert {"PREFILL", "MIDFILL", "DECODE"} <= phases


def test_a_worker_larger_than_a_node_takes_whole_consecutive_nodes():
    bound = load_cluster("b200x8").bind(load_model("kimi-k3-like"))
    homes = [w.node for w in bound.workers]
    assert homes == ["n0", "n2", "n4", "n6"]  # 16-GPU workers on pairs of 8-GPU nodes
