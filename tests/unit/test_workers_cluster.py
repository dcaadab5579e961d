import copy

import pytest

from costmodel.capacity import kv_capacity
from costmodel.hardware import load_hardware
from costmodel.model import load_model
from tests.factories import SMALL, small_cluster
from workers.cluster import KV_SHARE_OF_FREE_HBM, ClusterError
from workers.cluster_toml import cluster_from_dict, load_cluster

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
    # Llama's 8 KV heads split 4 ways at TP4: each GPU holds a quarter of every token's KV,
    # so the instance holds 4 GPUs' budgets of logical KV (one attention rank group).
    w = bound.workers[0]
    assert w.kv.ranks == 1
    assert w.kv.instance_bytes == pytest.approx(KV_SHARE_OF_FREE_HBM * hbm_free, rel=0.01)
    assert w.kv_capacity_bytes == pytest.approx(KV_SHARE_OF_FREE_HBM * hbm_free * 4, rel=0.01)
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


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (("colour",), r"small.toml: colour: unknown field \(known: name, description"),
        (("pfs", "read_gbps"), r"pfs.read_gbps: unknown field \(known: capacity_gb"),
        (("racks", 0, "cache"), r"racks\[0\].cache: unknown field"),
        (("nodes", 0, "gpu"), r"nodes\[0\].gpu: unknown field"),
        (("pools", 0, "tpp"), r"pools\[0\].tpp: unknown field"),
    ],
)
def test_an_unknown_field_is_refused_not_ignored(path, message):
    """A typo (`tpp = 2`) must not leave the default in place silently."""
    with pytest.raises(ClusterError, match=message):
        cluster_from_dict(_with(path, 2), "small.toml")


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
    from workers.cluster_toml import cluster_names

    k3 = load_model("kimi-k3-like")
    assert {"gb200-nvl72x1", "gb200-nvl72x2", "b200x8", "b300x8"} <= set(cluster_names())
    for name in cluster_names():
        bound = load_cluster(name).bind(k3)
        phases = {w.phase.name for w in bound.workers}
        assert {"PREFILL", "MIDFILL", "DECODE"} <= phases


def test_a_worker_larger_than_a_node_takes_whole_consecutive_nodes():
    bound = load_cluster("b200x8").bind(load_model("kimi-k3-like"))
    homes = [w.node for w in bound.workers]
    # The 32-GPU decode worker (pp 2 x 16) on four 8-GPU nodes, 16-GPU fills on pairs.
    assert homes == ["n0", "n4", "n6"]
    assert [w.layout.instance_gpus for w in bound.workers] == [32, 16, 16]


def _one_decode_pool(model_gpus=8, hardware="h200", **layout):
    return cluster_from_dict({
        "name": "one", "pfs": {"capacity_gb": 1000, "read_gb_per_s": 10, "write_gb_per_s": 10},
        "racks": [{"name": "r0", "cache_gb": 0, "cache_gb_per_s": 1}],
        "nodes": [{"name": n, "rack": "r0", "hardware": hardware, "gpus": model_gpus,
                   "dram_gb": 2000, "dram_gb_per_s": 200} for n in ("n0", "n1")],
        "pools": [{"name": "prefill", "phase": "prefill", "nodes": ["n1"], "gpus": 8, "tp": 8,
                   "ep": 8, "precision": "fp8"},
                  {"name": "decode", "phase": "decode", "nodes": ["n0"], "gpus": model_gpus,
                   "precision": "fp8", **layout}],
    }, "one.toml")


def test_mla_capacity_dp8_against_tp8_on_the_same_eight_gpus():
    """MLA's latent is whole on every TP rank: TP8 holds one copy per 8 GPUs, TP1 x DP8
    eight sequences' worth. Per GB of free HBM, 8x; overall ~6x for DeepSeek-V3 on H200,
    since TP1 keeps the whole attention (and dense) weights on every GPU."""
    v3 = load_model("deepseek-v3")
    dp = _one_decode_pool(tp=1, ep=8).bind(v3).workers[-1]
    tp = _one_decode_pool(tp=8, ep=8).bind(v3).workers[-1]
    assert (dp.kv.ranks, tp.kv.ranks) == (8, 1)
    per_gb = ((dp.kv_capacity_bytes / dp.kv.budget_bytes_per_gpu)
              / (tp.kv_capacity_bytes / tp.kv.budget_bytes_per_gpu))
    assert per_gb == pytest.approx(8.0, rel=1e-3)
    ratio = dp.kv_capacity_bytes / tp.kv_capacity_bytes
    assert 5.0 < ratio < 7.5
    # The old figure (free HBM x all 8 GPUs) overstated TP8 by 8x.
    old = KV_SHARE_OF_FREE_HBM * (load_hardware("h200").hbm_bytes
                                  - tp.kv.weight_bytes_per_gpu) * 8
    assert tp.kv_capacity_bytes == pytest.approx(old / 8, rel=1e-3)
    # A full store tier at the worker is a full budget on each GPU (one latent per rank).
    assert tp.blob_bytes_per_gpu(tp.kv_capacity_bytes) == pytest.approx(
        tp.kv.budget_bytes_per_gpu, rel=1e-5)
    assert dp.blob_bytes_per_gpu(dp.kv_capacity_bytes) == pytest.approx(
        dp.kv.budget_bytes_per_gpu, rel=1e-5)
    # Decode admits in per-GPU footprint units: a 100k-token sequence's share of each.
    at_100k = tp.kv.sequence_bytes_per_gpu(100_000)
    assert int(tp.kv.instance_bytes // at_100k) == tp.kv.sequences_at(100_000)


def test_gqa_beyond_its_kv_heads_replicates():
    """Qwen3-235B has 4 KV heads: TP8 splits each token's KV only 4 ways, so one TP8
    instance holds half what two TP4 attention ranks hold on the same 8 GPUs (per GB)."""
    qwen = load_model("qwen3-235b-a22b")
    tp4 = _one_decode_pool(tp=4, ep=8).bind(qwen).workers[-1]
    tp8 = _one_decode_pool(tp=8, ep=8).bind(qwen).workers[-1]
    assert tp4.kv.kv_bytes_per_token_per_gpu == pytest.approx(tp8.kv.kv_bytes_per_token_per_gpu)
    per_gb = ((tp4.kv.kv_capacity_tokens / tp4.kv.budget_bytes_per_gpu)
              / (tp8.kv.kv_capacity_tokens / tp8.kv.budget_bytes_per_gpu))
    assert per_gb == pytest.approx(2.0, rel=1e-3)
    expected = kv_capacity(qwen, load_hardware("h200"), tp8.layout)
    assert tp8.kv == expected


def test_the_toml_reader_has_one_home():
    """workers.cluster_toml reads clusters and imports workers.cluster; workers.cluster
    does not name the reader (no import circle, no module __getattr__)."""
    import workers.cluster as cluster
    import workers.cluster_toml as cluster_toml

    assert not hasattr(cluster, "load_cluster") and not hasattr(cluster, "DATA_DIR")
    assert cluster_toml.DATA_DIR.is_dir()
    assert cluster_toml.load_cluster("gb200-nvl72x2").name == "gb200-nvl72x2"
