"""Small builders for tests: a cluster description in a few lines."""

from __future__ import annotations

from workers.cluster import cluster_from_dict

SMALL = {
    "name": "small",
    "pfs": {"capacity_gb": 100_000, "read_gb_per_s": 200, "write_gb_per_s": 100},
    "racks": [{"name": "r0", "cache_gb": 500, "cache_gb_per_s": 100}],
    "nodes": [
        {"name": "n0", "rack": "r0", "hardware": "h200", "gpus": 8, "dram_gb": 2000,
         "dram_gb_per_s": 200},
        {"name": "n1", "rack": "r0", "hardware": "h200", "gpus": 8, "dram_gb": 2000,
         "dram_gb_per_s": 200},
    ],
    "pools": [
        {"name": "prefill", "phase": "prefill", "nodes": ["n0"], "gpus": 4, "tp": 4,
         "precision": "bf16"},
        {"name": "midfill", "phase": "midfill", "nodes": ["n0"], "gpus": 4, "tp": 4,
         "precision": "bf16"},
        {"name": "decode", "phase": "decode", "nodes": ["n1"], "gpus": 8, "tp": 4,
         "precision": "bf16", "target_batch": 4},
    ],
}


def small_cluster(**changes):
    data = {**SMALL, **changes}
    return cluster_from_dict(data, "small.toml")
