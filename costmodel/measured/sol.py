"""Speed-of-light times (seconds) the tables extrapolate with.

Outside the measured range a table's utilisation (SOL / measured) is held and
the SOL carries the growth, so these formulas are the same roofline bounds the
package pairs with each table (max of math and memory time), written once for
floats and arrays.
"""

from __future__ import annotations

import numpy as np

from costmodel.measured.catalog import SystemSpec

# Bytes per element of a table dtype.
_BYTES = {"bfloat16": 2.0, "float16": 2.0, "half": 2.0, "fp8": 1.0, "fp8_block": 1.0,
          "fp8_static": 1.0, "int8": 1.0, "nvfp4": 9.0 / 16.0, "w4a16_mxfp4": 0.5}


def dtype_bytes(dtype: str) -> float:
    if dtype not in _BYTES:
        raise ValueError(f"unknown table dtype {dtype!r}; known: {sorted(_BYTES)}")
    return _BYTES[dtype]


def gemm(spec: SystemSpec, dtype: str, m, n, k):
    # 2mnk FLOPs; A, B and C each touched once.
    math = 2.0 * m * n * k / spec.tc_flops(dtype)
    mem = dtype_bytes(dtype) * (m * n + m * k + n * k) / spec.mem_bw_bytes_per_s
    return np.maximum(math, mem)


def context_attention(spec, fmha: str, kv: str, n_kv_lookup: int, head_dim: int, window: int,
                      n, s, b):
    n_kv = n if n_kv_lookup == 0 else n_kv_lookup
    # Causal prefill: half of the s^2 score matrix, QK^T and PV, 2 FLOPs per MAC.
    ops = np.where((window > 0) & (s > window), 2.0 * b * s * window * n * head_dim * 2.0,
                   2.0 * b * s * s * n * head_dim)
    mem = 2.0 * b * (2.0 * n * s * head_dim) + dtype_bytes(kv) * b * 2.0 * n_kv * s * head_dim
    return np.maximum(ops / spec.tc_flops(fmha), mem / spec.mem_bw_bytes_per_s)


def generation_attention_flops(spec: SystemSpec, kv: str) -> float:
    # fp8 KV decodes on fp8 MMA only where the GPU has it (SM >= 89).
    return spec.fp8_flops if kv == "fp8" and spec.sm_version >= 89 else spec.bf16_flops


def generation_attention(spec, kv: str, n_kv_lookup: int, head_dim: int, window: int, n, b, s):
    n_kv = n if n_kv_lookup == 0 else n_kv_lookup
    kv_len = np.minimum(s - 1.0, window) if window > 0 else s - 1.0
    ops = 2.0 * b * n * head_dim * 2.0 * kv_len
    mem = b * (n * head_dim * 2.0 + 2.0 * n_kv * kv_len * head_dim * dtype_bytes(kv)
               + n * head_dim * 2.0)
    return np.maximum(ops / generation_attention_flops(spec, kv), mem / spec.mem_bw_bytes_per_s)


def context_mla(spec, fmha: str, kv: str, n, s, b):
    # DeepSeek MLA head: 192 (qk) + 128 (v) per head, causal.
    ops = b * n * (192.0 + 128.0) * s * s
    mem = b * n * (dtype_bytes(kv) * s * 320.0 + 2.0 * s * 320.0)
    return np.maximum(ops / spec.tc_flops(fmha), mem / spec.mem_bw_bytes_per_s)


def generation_mla_module(spec, kv: str, gemm_dtype: str, n, b, s):
    # Absorbed decode: 1088 = 2 x (512 latent + 32) per head; 576-byte latent per token;
    # plus the two absorbed 128x512 BMMs.
    math = 2.0 * b * n * 1088.0 * s / generation_attention_flops(spec, kv)
    mem = b * (n * 1088.0 * 2.0 + (s - 1.0) * 576.0 * dtype_bytes(kv))
    math = math + 4.0 * b * n * 128.0 * 512.0 / spec.tc_flops(gemm_dtype)
    mem = mem + 2.0 * n * (b * 640.0 + 128.0 * 512.0) * dtype_bytes(gemm_dtype)
    return np.maximum(math, mem / spec.mem_bw_bytes_per_s)


def moe(spec, dtype: str, tokens, hidden: int, inter: int, topk: int, experts: int,
        tp: int, ep: int, gated: bool = True):
    gemms = 3 if gated else 2
    routed = np.floor(np.asarray(tokens, dtype=float)) * topk
    per_ep = np.floor(routed / ep)
    ops = np.floor(routed * hidden * inter * gemms * 2 / ep / tp)
    # Weights of the experts actually touched: at most one per routed token.
    mem = (per_ep * hidden * 2 + np.floor(per_ep * inter * gemms / tp)
           + np.floor(hidden * inter * gemms / tp) * np.minimum(experts // ep, per_ep))
    return np.maximum(ops / spec.tc_flops(dtype), mem * dtype_bytes(dtype) / spec.mem_bw_bytes_per_s)


def memory_op(spec: SystemSpec, nbytes):
    """The package's rule for untabulated memory-bound ops (norms, adds, embedding)."""
    return (np.asarray(nbytes, dtype=float) / (spec.mem_bw_bytes_per_s * spec.mem_bw_empirical_scale)
            + spec.mem_constant_latency_s)
