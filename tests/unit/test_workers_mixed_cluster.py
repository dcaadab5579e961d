"""Mixed pools in a cluster description, and routing to them."""

import copy

import pytest

from orchestrator.control.router import FillCandidate, choose_fill_worker
from orchestrator.kit.scenario import KIT_CLUSTER
from workers.cluster import ClusterError
from workers.cluster_toml import MIXED, cluster_from_dict

MIXED_POOL = {"name": "mixed", "phase": "mixed", "nodes": ["n0", "n1"], "gpus": 16, "tp": 4,
              "precision": "bf16", "target_batch": 8, "max_batch_sequences": 8}


def with_pools(*pools):
    data = copy.deepcopy(KIT_CLUSTER)
    data["pools"] = list(pools)
    return data


def test_an_all_mixed_cluster_is_read():
    spec = cluster_from_dict(with_pools(MIXED_POOL), "agg.toml")
    (pool,) = spec.pools
    assert pool.phase is MIXED and pool.phase.name.lower() == "mixed" and pool.workers == 4


def test_mixed_beside_decode_pools_is_refused_naming_the_pool():
    data = with_pools({**MIXED_POOL, "gpus": 8, "nodes": ["n0"]}, KIT_CLUSTER["pools"][2])
    with pytest.raises(ClusterError, match=r"pools\[1\]\.phase: decode beside mixed pool mixed"):
        cluster_from_dict(data, "both.toml")


def test_a_cluster_without_mixed_still_needs_prefill_and_decode():
    with pytest.raises(ClusterError, match="needs at least one decode pool"):
        cluster_from_dict(with_pools(KIT_CLUSTER["pools"][0]), "half.toml")


def test_an_unknown_phase_lists_mixed():
    with pytest.raises(ClusterError, match=r"pools\[0\]\.phase: expected prefill, midfill or "
                                           r"decode \(or decode-experts\), or mixed, got 'aggregated'"):
        cluster_from_dict(with_pools({**MIXED_POOL, "phase": "aggregated"}), "bad.toml")


def test_a_mixed_pool_has_no_experts_pool():
    with pytest.raises(ClusterError, match="experts_pool: only a decode pool"):
        cluster_from_dict(with_pools({**MIXED_POOL, "experts_pool": "x"}), "bad.toml")


def candidate(name, phase, node="n0", queued=0, accepting=True):
    return FillCandidate(name, phase, node, queued, accepting)


def test_calls_go_to_mixed_workers_when_there_are_any():
    cands = [candidate("prefill-0", "prefill"), candidate("mixed-0", "mixed", queued=500),
             candidate("mixed-1", "mixed", node="n1", queued=100)]
    assert choose_fill_worker(0, cands, frozenset()) == "mixed-1"  # least queued
    assert choose_fill_worker(0, cands, frozenset({"n0"})) == "mixed-0"  # prefix affinity
    closed = [c if c.phase != "mixed" else candidate(c.name, "mixed", accepting=False)
              for c in cands]
    assert choose_fill_worker(0, closed, frozenset()) == "prefill-0"
