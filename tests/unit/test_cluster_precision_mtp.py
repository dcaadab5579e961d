"""Cluster pools: a precision for non-expert weights, MTP by default where the model ships it."""

import copy

import pytest

from costmodel.memory import weight_bytes_per_gpu
from costmodel.model import load_model
from costmodel.phase import Phase
from costmodel.precision import Precision
from workers.cluster import ClusterError
from workers.cluster_toml import cluster_from_dict, with_decode_mtp

DS = load_model("deepseek-v3")
K3 = load_model("kimi-k3-like")

BASE = {
    "name": "two-h200-nodes",
    "pfs": {"capacity_gb": 100_000, "read_gb_per_s": 200, "write_gb_per_s": 100},
    "racks": [{"name": "r0"}],
    "nodes": [{"name": f"n{i}", "rack": "r0", "hardware": "h200", "gpus": 16,
               "dram_gb": 2000, "dram_gb_per_s": 200} for i in range(2)],
    "pools": [
        {"name": "prefill", "phase": "prefill", "nodes": ["n0"], "gpus": 8, "tp": 8, "ep": 8},
        {"name": "decode", "phase": "decode", "nodes": ["n1"], "gpus": 16, "tp": 8, "ep": 8},
    ],
}


def _cluster(prefill=None, **decode):
    data = copy.deepcopy(BASE)
    data["pools"][0].update(prefill or {})
    data["pools"][1].update(decode)
    return cluster_from_dict(data, "two.toml")


def _layouts(bound, phase):
    return {w.layout for w in bound.workers if w.phase is phase}


def test_decode_without_mtp_runs_the_models_shipped_head():
    spec = _cluster()
    (ds,) = _layouts(spec.bind(DS), Phase.DECODE)
    assert ds.mtp == 1 and not ds.mtp_from_model
    (fill,) = _layouts(spec.bind(DS), Phase.PREFILL)
    assert fill.mtp == 0
    # Llama ships no MTP module: the same description runs it without drafts.
    dense = {"ep": 1, "precision": "bf16"}
    (llama,) = _layouts(_cluster(dense, **dense).bind(load_model("llama-3.1-70b")),
                        Phase.DECODE)
    assert llama.mtp == 0


def test_an_explicit_mtp_is_kept_and_the_override_reaches_every_decode_pool():
    (off,) = _layouts(_cluster(mtp=0).bind(DS), Phase.DECODE)
    assert off.mtp == 0
    (three,) = _layouts(with_decode_mtp(_cluster(), 3).bind(DS), Phase.DECODE)
    assert three.mtp == 3
    (zero,) = _layouts(with_decode_mtp(_cluster(mtp=2), 0).bind(DS), Phase.DECODE)
    assert zero.mtp == 0
    (fill,) = _layouts(with_decode_mtp(_cluster(), 3).bind(DS), Phase.PREFILL)
    assert fill.mtp == 0
    with pytest.raises(ClusterError, match="mtp: expected an integer >= 0, got -1"):
        with_decode_mtp(_cluster(), -1)


def test_attention_precision_sets_the_non_expert_weights():
    (bf16,) = _layouts(_cluster(attention_precision="bf16").bind(DS), Phase.DECODE)
    (fp8,) = _layouts(_cluster().bind(DS), Phase.DECODE)
    assert bf16.attention_weights is Precision.BF16 and bf16.weights is Precision.FP8
    assert fp8.attention_weights is None
    assert weight_bytes_per_gpu(DS, bf16) > weight_bytes_per_gpu(DS, fp8)
    with pytest.raises(ClusterError, match=r"pools\[1\].attention_precision: expected bf16 or "
                                           r"fp8, got 'fp4'"):
        _cluster(attention_precision="fp4")


def test_binding_refuses_a_slice_whose_weights_do_not_fit():
    # K3-like at TP1 x EP16 on H200: 129.6 GB per GPU with FP8 non-expert weights fits;
    # BF16 ones make 168.7 GB, over the 141 GB.
    wide = {"gpus": 16, "tp": 1, "ep": 16, "precision": "fp4"}
    _cluster(wide, **wide).bind(K3)
    with pytest.raises(ClusterError) as exc:
        _cluster(wide, **wide, attention_precision="bf16").bind(K3)
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith("pool decode: the model slice does not fit: 168.7 GB of weights "
                              "per GPU > 141.0 GB HBM of h200")
