"""A benchmark layout at a concurrency as a cluster description, checked as a file is.

Engines run a benchmark with their batch limited by KV memory, not by a small batch
target (vLLM's `max_num_seqs`, SGLang's `max_running_requests` and TensorRT-LLM's
`max_batch_size` are set at or above the concurrency the sweeps run), so each decoding
worker aims to run its share of the C users: `ceil(C / attention ranks)` sequences per
rank, the KV budget admitting fewer where they do not fit. Prefill chunks: `MIXED_CHUNK_TOKENS`
a step on a mixed worker (vLLM's and SGLang's default chunked-prefill budget is of this
order), `PREFILL_CHUNK_TOKENS` on a prefill worker. Nodes, racks, host memory and the
file system take the presets' figures for that kind of machine (`costmodel.plan_toml`).
"""

from __future__ import annotations

import math

from costmodel.hardware import HardwareSpec
from costmodel.plan_sizing import Nodes
from costmodel.plan_toml import site_of
from costmodel.precision import Precision
from orchestrator.bench.layouts import BenchLayout, Family, PoolLayout
from workers.cluster import ClusterSpec
from workers.cluster_toml import cluster_from_dict

MIXED_CHUNK_TOKENS = 8192
PREFILL_CHUNK_TOKENS = 16384


def decode_units(layout: BenchLayout) -> int:
    """Attention ranks that decode, over every decoding worker and pipeline stage."""
    return sum(p.workers * p.ranks * p.pp for p in layout.pools if p.phase != "prefill")


def cluster_spec(layout: BenchLayout, hardware: HardwareSpec, hardware_ref: str,
                 precision: Precision, kv_precision: Precision, concurrency: int,
                 shortest_input: int) -> ClusterSpec:
    """`layout` as a cluster for `concurrency` users (module doc). `hardware_ref` is how
    the nodes name the hardware (a preset's name or a file)."""
    site = site_of(hardware.name)
    nodes = Nodes.of(layout.gpus, hardware.scale_up_domain_gpus)
    names = [f"n{i}" for i in range(nodes.count)]
    per_rank = max(1, math.ceil(concurrency / max(decode_units(layout), 1)))
    pools = []
    for p in sorted(layout.pools, key=lambda p: -p.worker_gpus):  # placed largest first
        pool = {"name": p.phase, "phase": p.phase, "nodes": names, "gpus": p.gpus,
                "pp": p.pp, "tp": p.tp, "ep": p.ep, "precision": precision.name.lower(),
                "kv_precision": kv_precision.name.lower()}
        if p.phase == "prefill":
            pool |= {"max_batch_tokens": PREFILL_CHUNK_TOKENS,
                     "max_batch_sequences": max(1, PREFILL_CHUNK_TOKENS // shortest_input),
                     "target_batch": 1}
        else:
            slots = per_rank * p.ranks * p.pp
            pool |= {"mtp": layout.mtp, "target_batch": per_rank, "max_batch_sequences": slots}
            if p.phase == "mixed":
                pool["max_batch_tokens"] = MIXED_CHUNK_TOKENS
        pools.append(pool)
    data = {
        "name": layout.name, "description": f"{layout.name} on {layout.gpus} {hardware.name}",
        "pfs": {"capacity_gb": site.pfs_gb, "read_gb_per_s": site.pfs_read_gb_per_s,
                "write_gb_per_s": site.pfs_write_gb_per_s},
        "racks": [{"name": f"r{r}", "cache_gb": site.cache_gb,
                   "cache_gb_per_s": site.cache_gb_per_s}
                  for r in range(math.ceil(nodes.count / site.nodes_per_rack))],
        "nodes": [{"name": names[i], "rack": f"r{i // site.nodes_per_rack}",
                   "hardware": hardware_ref, "gpus": size, "dram_gb": site.dram_gb,
                   "dram_gb_per_s": site.dram_gb_per_s}
                  for i, size in enumerate(nodes.sizes())],
        "pools": pools,
    }
    return cluster_from_dict(data, f"bench layout {layout.name!r}")


def layout_of_cluster(spec: ClusterSpec, mtp: int) -> BenchLayout:
    """A cluster file run as given: its family from its pools, its own name."""
    family = (Family.AGGREGATED if any(p.phase.name == "MIXED" for p in spec.pools)
              else Family.DISAGGREGATED)
    pools = tuple(PoolLayout(p.phase.name.lower(), p.workers, p.layout.pp, p.layout.tp,
                             p.layout.ep) for p in spec.pools)
    return BenchLayout(family, pools, mtp, name_=spec.name)
