"""Per-kernel queries on loaded tables: latency_s arrays, or what is not covered.

Each query varies along one dimension given as an array (tokens, batch or
message size) with the other coordinates fixed, and returns either a float
array of seconds or a ``NotCovered`` naming the table and key that is missing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.measured import sol
from costmodel.measured.interp import curve_query
from costmodel.measured.tables import MeasuredTables


@dataclass(frozen=True)
class NotCovered:
    """The tables cannot price this kernel: which table, and which key is absent."""

    table: str
    key: str

    def __str__(self) -> str:
        return f"{self.table} has no {self.key}"


Priced = np.ndarray | NotCovered


def _nan_check(out: np.ndarray, table: str, key: str) -> Priced:
    if np.isnan(out).any():
        return NotCovered(table, f"{key} (no measured point to anchor on)")
    return out


def gemm(t: MeasuredTables, m, n: int, k: int, dtype: str) -> Priced:
    """GEMM of m x k by k x n (per GPU) at ``dtype``."""
    if t.gemm is None or dtype not in t.gemm:
        return NotCovered("gemm", f"dtype={dtype}")
    out = t.gemm[dtype].query(np.asarray(m, dtype=float), n, k,
                              lambda mm, nn, kk: sol.gemm(t.system, dtype, mm, nn, kk))
    return _nan_check(out, "gemm", f"m,n={n},k={k},dtype={dtype}")


def context_attention(t: MeasuredTables, batch, isl, heads: int, kv_heads: int, head_dim: int,
                      fmha: str, kv: str, window: int = 0) -> Priced:
    """Causal prefill attention for ``batch`` prompts of ``isl`` tokens (no prefix)."""
    nkv = 0 if heads == kv_heads else kv_heads
    key = (fmha, kv, nkv, head_dim, window)
    if t.context_attention is None or key not in t.context_attention:
        return NotCovered("context_attention", f"fmha={fmha},kv={kv},kv_heads={nkv},head_dim={head_dim}")
    s = t.system
    out = t.context_attention[key].query(
        heads, isl, batch,
        lambda n, q, b: sol.context_attention(s, fmha, kv, nkv, head_dim, window, n, q, b))
    return _nan_check(out, "context_attention", f"heads={heads}")


def generation_attention(t: MeasuredTables, batch, kv_len, heads: int, kv_heads: int,
                         head_dim: int, kv: str, window: int = 0) -> Priced:
    """One decode step's attention; ``kv_len`` counts the new token too.

    Averaged over five lengths in [0.9, 1.1] x kv_len, as the package smooths
    decode attention (a batch's lengths drift around the nominal one).
    """
    nkv = 0 if heads == kv_heads else kv_heads
    key = (kv, nkv, head_dim, window)
    if t.generation_attention is None or key not in t.generation_attention:
        return NotCovered("generation_attention", f"kv={kv},kv_heads={nkv},head_dim={head_dim}")
    s = t.system
    batch, kv_len = np.broadcast_arrays(np.atleast_1d(np.asarray(batch, float)),
                                        np.asarray(kv_len, float))
    grid = t.generation_attention[key]
    total = np.zeros(batch.shape)
    for i in range(5):
        lo = np.maximum(np.floor(kv_len * 0.9), 1)
        hi = np.maximum(np.floor(kv_len * 1.1), lo)
        sample = lo + np.floor((hi - lo) * i / 4)
        total += grid.query(heads, batch, sample, lambda n, b, q: sol.generation_attention(
            s, kv, nkv, head_dim, window, n, b, q))
    return _nan_check(total / 5.0, "generation_attention", f"heads={heads}")


def context_mla_module(t: MeasuredTables, batch, isl, heads: int, fmha: str, kv: str,
                       gemm_dtype: str) -> Priced:
    """A whole DeepSeek MLA block in prefill (projections + attention), per layer."""
    key = (fmha, kv, gemm_dtype)
    if t.context_mla_module is None or key not in t.context_mla_module:
        return NotCovered("mla_context_module", f"fmha={fmha},kv={kv},gemm={gemm_dtype}")
    s = t.system
    out = t.context_mla_module[key].query(
        heads, isl, batch, lambda n, q, b: sol.context_mla(s, fmha, kv, n, q, b))
    return _nan_check(out, "mla_context_module", f"heads={heads}")


def generation_mla_module(t: MeasuredTables, batch, kv_len, heads: int, kv: str,
                          gemm_dtype: str) -> Priced:
    """A whole DeepSeek MLA block in one decode step, per layer."""
    key = (kv, gemm_dtype)
    if t.generation_mla_module is None or key not in t.generation_mla_module:
        return NotCovered("mla_generation_module", f"kv={kv},gemm={gemm_dtype}")
    s = t.system
    out = t.generation_mla_module[key].query(
        heads, batch, kv_len, lambda n, b, q: sol.generation_mla_module(s, kv, gemm_dtype, n, b, q))
    return _nan_check(out, "mla_generation_module", f"heads={heads}")


def moe(t: MeasuredTables, tokens, hidden: int, inter: int, topk: int, experts: int,
        tp: int, ep: int, dtype: str, distribution: str = "power_law_1.01") -> Priced:
    """Grouped expert GEMMs for ``tokens`` tokens entering one EP rank group."""
    if t.moe is None:
        return NotCovered("moe", "any table")
    shape = (topk, experts, hidden, inter, tp, ep)
    curve = t.moe.get((dtype, distribution, *shape)) or t.moe.get((dtype, "uniform", *shape))
    if curve is None:
        return NotCovered("moe", f"dtype={dtype},distribution={distribution},topk={topk},"
                          f"experts={experts},hidden={hidden},inter={inter},tp={tp},ep={ep}")
    if len(curve.x) < 2 and np.any(np.asarray(tokens) < curve.x[0]):
        return NotCovered("moe", f"tokens below its single measured point {curve.x[0]:.0f}")
    return curve_query(curve.x, curve.latency_s, np.floor(np.asarray(tokens, float)),
                       lambda x: sol.moe(t.system, dtype, x, hidden, inter, topk, experts, tp, ep))


def _beyond_measured(t: MeasuredTables, gpus: int, measured: int) -> float:
    """The package's factor for a collective over more GPUs than were measured: the
    ring's (n-1)/n volume over the measured group's, times the ratio of link bandwidths
    (``get_p2p_bandwidth``: node, then rack-wide NVLink, then across racks)."""
    s = t.system
    return ((gpus - 1) / gpus * measured / max(measured - 1, 1)
            * s.p2p_bw_bytes_per_s(measured) / s.p2p_bw_bytes_per_s(gpus))


def custom_allreduce(t: MeasuredTables, elements, gpus: int) -> Priced:
    """The engine's own all-reduce of ``elements`` 16-bit values over ``gpus`` GPUs.

    As the package does: the group is capped at the system's GPUs per node (4 on a
    GB200/GB300 tray, which is what the package's system files say, so the rack's
    8-GPU groups read the 4-GPU curve) and scaled by ``_beyond_measured`` past it."""
    elements = np.asarray(elements, dtype=float)
    if gpus <= 1:
        return np.zeros(elements.shape)
    measured = min(gpus, t.system.gpus_per_node)
    if t.custom_allreduce is None or (measured,) not in t.custom_allreduce:
        return NotCovered("custom_allreduce", f"gpus={measured}")
    c = t.custom_allreduce[(measured,)]
    out = curve_query(c.x, c.latency_s, elements, lambda x: x)
    return out * _beyond_measured(t, gpus, measured) if gpus > measured else out


def nccl(t: MeasuredTables, op: str, elements, gpus: int, dtype: str = "half") -> Priced:
    """An NCCL collective (all_gather, reduce_scatter, all_reduce, alltoall).

    As the package does: a group larger than any measured for ``(dtype, op)`` reads the
    largest measured one, scaled by ``_beyond_measured``."""
    elements = np.asarray(elements, dtype=float)
    if gpus <= 1:
        return np.zeros(elements.shape)
    sizes = [] if t.nccl is None else [k[2] for k in t.nccl if k[:2] == (dtype, op)]
    measured = min(gpus, max(sizes, default=gpus))
    if (dtype, op, measured) not in (t.nccl or {}):
        return NotCovered("nccl", f"op={op},dtype={dtype},gpus={gpus}")
    c = t.nccl[(dtype, op, measured)]
    out = curve_query(c.x, c.latency_s, elements, lambda x: x)
    return out * _beyond_measured(t, gpus, measured) if gpus > measured else out


def memory_op(t: MeasuredTables, nbytes) -> np.ndarray:
    """Untabulated memory-bound kernels, by the package's empirical bandwidth rule."""
    return sol.memory_op(t.system, nbytes)
