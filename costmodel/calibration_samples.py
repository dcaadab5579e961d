"""Samples of the measured kernel tables, priced by the roofline's own formulas.

`costmodel/calibration.py` fits the roofline's factors on them. Each class's
samples keep, per measured point, the roofline's compute time at peak (split
into the part its own factor prices and a part another class's factor prices),
its HBM (or link) time at full bandwidth, and the measured time. Needs the
`measured` extra.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from costmodel.hardware import HardwareSpec, load_hardware
from costmodel.model import load_model
from costmodel.precision import Precision

# Table system -> our hardware preset (same GPU; peaks and bandwidths from our TOML).
SYSTEMS = {"h100_sxm": "h100", "h200_sxm": "h200", "b200_sxm": "b200", "gb200": "gb200"}
ENGINES = ("trtllm", "sglang", "vllm")
_PREC = {"bfloat16": Precision.BF16, "fp8": Precision.FP8, "fp8_block": Precision.FP8}
_BYTES = {"bfloat16": 2.0, "fp8": 1.0, "fp8_block": 1.0}


class Regime(Enum):
    PREFILL = "compute-bound prefill"
    LARGE_DECODE = "large-batch decode"
    BATCH1_DECODE = "batch-1 decode"


@dataclass(frozen=True)
class Samples:
    """One class's samples: the roofline's FLOPs and bytes at peak (seconds) per sample,
    split as the roofline splits them, and the measured time."""

    gpu: np.ndarray  # our hardware name per sample
    regime: np.ndarray  # Regime.value per sample
    fixed_s: np.ndarray  # compute time at peak priced by another (already fitted) class
    flops_s: np.ndarray  # compute time at peak priced by this class's factor
    bytes_s: np.ndarray  # HBM time at full bandwidth
    measured_s: np.ndarray

    def take(self, keep: np.ndarray) -> Samples:
        return Samples(*(getattr(self, f)[keep] for f in
                         ("gpu", "regime", "fixed_s", "flops_s", "bytes_s", "measured_s")))


class _Builder:
    def __init__(self):
        self.rows: list[tuple] = []

    def add(self, gpu, regime, fixed_s, flops_s, bytes_s, measured_s):
        n = np.size(measured_s)
        b = np.broadcast_arrays(*(np.asarray(x, float) for x in
                                  (fixed_s, flops_s, bytes_s, measured_s)))
        self.rows.append((np.full(n, gpu), np.full(n, regime.value), *(x.ravel() for x in b)))

    def build(self) -> Samples:
        if not self.rows:
            raise ValueError("no samples")
        cols = list(zip(*self.rows, strict=True))
        return Samples(*(np.concatenate(c) for c in cols))


def _gemm(b: _Builder, t, hw: HardwareSpec, regimes) -> None:
    """Dense GEMMs at model-like sites (n, k in 1,024-32,768)."""
    for dtype, curves in (t.gemm or {}).items():
        if dtype not in _PREC:
            continue
        peak = hw.flops_per_s(_PREC[dtype])
        for n, k, xs, ys in zip(curves.site_n, curves.site_k, curves.curve_x, curves.curve_y,
                                strict=True):
            if not (1024 <= n <= 32768 and 1024 <= k <= 32768):
                continue
            for regime, lo, hi in regimes:
                sel = (xs >= lo) & (xs <= hi)
                if sel.any():
                    m = xs[sel]
                    b.add(hw.name, regime, 0.0, 2.0 * m * n * k / peak,
                          n * k * _BYTES[dtype] / hw.hbm_bytes_per_s, ys[sel])


def _grid_points(grid, sel0, sel1, sel2):
    """(a0, a1, a2, value) of a Grid3's measured points inside the three selections."""
    a0, a1, a2 = np.meshgrid(*grid.axes, indexing="ij")
    keep = sel0(a0) & sel1(a1) & sel2(a2) & np.isfinite(grid.values)
    return a0[keep], a1[keep], a2[keep], grid.values[keep]


def _moe(b: _Builder, t, hw: HardwareSpec, regimes, imbalance: float) -> None:
    """Grouped expert GEMMs, priced as `Kernels` prices routed experts."""
    for key, curve in (t.moe or {}).items():
        dtype, dist, topk, experts, hidden, inter, mtp, mep = key
        if dtype not in _PREC or dist != "power_law_1.01" or hidden < 2048 or mep > 64:
            continue
        peak, wb = hw.flops_per_s(_PREC[dtype]), _BYTES[dtype]
        per_expert = curve.x * topk / experts
        for regime, lo, hi in regimes:
            # Batch 1: tokens entering the group; otherwise tokens per expert, what a
            # grouped GEMM's efficiency follows.
            x = curve.x if regime is Regime.BATCH1_DECODE else per_expert
            sel = (x >= lo) & (x <= hi)
            if not sel.any():
                continue
            tokens = curve.x[sel]
            params = 3.0 * hidden * inter / max(1.0, mtp / mep)
            flops = 2.0 * tokens * topk / mep * params * imbalance
            miss = np.clip(1.0 - topk / experts, 0.0, 1.0)
            touched = experts * (1.0 - miss ** tokens) * np.ceil(experts / mep) / experts
            b.add(hw.name, regime, 0.0, flops / peak, touched * params * wb / hw.hbm_bytes_per_s,
                  curve.latency_s[sel])


def _gqa_attention(b: _Builder, t, hw: HardwareSpec) -> None:
    bf16 = hw.flops_per_s(Precision.BF16)
    for key, grid in (t.context_attention or {}).items():
        fmha, kv, nkv, head_dim, window = key
        if fmha != "bfloat16" or head_dim != 128 or window != 0 or kv not in _BYTES:
            continue
        n, s, bt, lat = _grid_points(grid, lambda h: h >= 8, lambda s: (s >= 1024) & (s <= 16384),
                                     lambda x: x >= 1)
        keep = bt * s <= 65536
        n, s, bt, lat = n[keep], s[keep], bt[keep], lat[keep]
        kvh = n if nkv == 0 else np.minimum(nkv, n)
        flops = bt * s * 4.0 * n * head_dim * (s + 1.0) / 2.0
        nbytes = bt * s * 2.0 * kvh * head_dim * _BYTES[kv]
        b.add(hw.name, Regime.PREFILL, 0.0, flops / bf16, nbytes / hw.hbm_bytes_per_s, lat)


def _gqa_decode(b: _Builder, t, hw: HardwareSpec, regimes) -> None:
    bf16 = hw.flops_per_s(Precision.BF16)
    for key, grid in (t.generation_attention or {}).items():
        kv, nkv, head_dim, window = key
        if head_dim != 128 or window != 0 or kv not in _BYTES or nkv == 0:
            continue
        for regime, blo, bhi in regimes:
            n, bt, s, lat = _grid_points(grid, lambda h: h >= 8,
                                         lambda x, lo=blo, hi=bhi: (x >= lo) & (x <= hi),
                                         lambda s: (s >= 2048) & (s <= 16384))
            kvh = np.minimum(nkv, n)
            flops = bt * 4.0 * n * head_dim * s
            nbytes = bt * s * 2.0 * kvh * head_dim * _BYTES[kv]
            b.add(hw.name, regime, 0.0, flops / bf16, nbytes / hw.hbm_bytes_per_s, lat)


def _mla(b: _Builder, t, hw: HardwareSpec, decode: bool, regimes=()) -> None:
    """The whole MLA block, priced as `_attention` prices it for DeepSeek-V3."""
    m = load_model("deepseek-v3")
    bf16 = hw.flops_per_s(Precision.BF16)
    grids = t.generation_mla_module if decode else t.context_mla_module
    for key, grid in (grids or {}).items():
        kv, gemm = (key[0], key[1]) if decode else (key[1], key[2])
        if (not decode and key[0] != "bfloat16") or kv not in _BYTES or gemm not in _PREC:
            continue
        pg, wb = hw.flops_per_s(_PREC[gemm]), _BYTES[gemm]
        kv_tok = m.kv_elems_per_token_layer * _BYTES[kv]
        if decode:
            for regime, blo, bhi in regimes:
                n, bt, s, lat = _grid_points(grid, lambda h: h >= 16,
                                             lambda x, lo=blo, hi=bhi: (x >= lo) & (x <= hi),
                                             lambda s: (s >= 2048) & (s <= 16384))
                tp = m.mla.heads / n
                proj = 2.0 * bt * m.attn_params / tp / pg
                ctx = bt * m.attn_flops_per_ctx_token_decode * s / tp / bf16
                nbytes = m.attn_params / tp * wb + bt * s * kv_tok
                b.add(hw.name, regime, proj, ctx, nbytes / hw.hbm_bytes_per_s, lat)
        else:
            n, s, bt, lat = _grid_points(grid, lambda h: h >= 16,
                                         lambda s: (s >= 1024) & (s <= 16384), lambda x: x >= 1)
            keep = bt * s <= 32768
            n, s, bt, lat = n[keep], s[keep], bt[keep], lat[keep]
            tp, tok = m.mla.heads / n, bt * s
            proj = 2.0 * tok * m.attn_params / tp / pg
            ctx = tok * m.attn_flops_per_ctx_token_prefill * (s + 1.0) / 2.0 / tp / bf16
            nbytes = m.attn_params / tp * wb + tok * kv_tok
            b.add(hw.name, Regime.PREFILL, proj, ctx, nbytes / hw.hbm_bytes_per_s, lat)


def _allreduce(b: _Builder, t, hw: HardwareSpec) -> None:
    """The roofline's TP all-reduce: 2 (g - 1) / g of the message over one direction of
    scale-up, plus a floor. Message sizes in 16-bit elements."""
    for (gpus,), c in (t.custom_allreduce or {}).items():
        sel = (c.x >= 4096) & (c.x <= 64 * 2**20)
        nbytes = 2.0 * (gpus - 1) / gpus * c.x[sel] * 2.0
        b.add(hw.name, Regime.LARGE_DECODE, 0.0, 0.0, nbytes / hw.scale_up_bytes_per_s,
              c.latency_s[sel])


def _alltoall(b: _Builder, t, hw: HardwareSpec) -> None:
    """The roofline's EP dispatch inside the scale-up domain: the (g - 1) / g of a rank's
    buffer bound for other GPUs over one direction of scale-up, plus a floor (NCCL's
    all-to-all, 16-bit elements; the engines' own EP kernels are not in these tables)."""
    for (dtype, op, gpus), c in (t.nccl or {}).items():
        if dtype != "half" or op != "alltoall":
            continue
        sel = (c.x >= 4096) & (c.x <= 64 * 2**20)
        nbytes = (gpus - 1) / gpus * c.x[sel] * 2.0
        b.add(hw.name, Regime.LARGE_DECODE, 0.0, 0.0, nbytes / hw.scale_up_bytes_per_s,
              c.latency_s[sel])


CLASSES = ("hbm_floor", "dense_gemm", "moe_gemm", "gqa_prefill", "mla_prefill", "gqa_decode",
           "mla_decode", "allreduce", "alltoall")
GEMM_REGIMES = ((Regime.PREFILL, 2048, 16384), (Regime.LARGE_DECODE, 64, 512),
                (Regime.BATCH1_DECODE, 1, 1))
# Grouped GEMMs by tokens per expert (batch 1: tokens in). The tables stop at 16,384
# tokens in: 512 per expert for DeepSeek-V3, where wide-EP prefill sees thousands.
MOE_REGIMES = ((Regime.PREFILL, 512, np.inf), (Regime.LARGE_DECODE, 8, 64),
               (Regime.BATCH1_DECODE, 1, 8))
DECODE_REGIMES = ((Regime.LARGE_DECODE, 64, 512), (Regime.BATCH1_DECODE, 1, 1))


def collect(systems=tuple(SYSTEMS), engines=ENGINES, ep_imbalance: float = 1.15) -> dict:
    """Every class's samples over the systems and engines given (each engine's default
    version, older versions filling gaps as `costmodel/measured` reads them)."""
    from costmodel.measured.catalog import Engine, default_version
    from costmodel.measured.tables import load_tables

    builders = {c: _Builder() for c in CLASSES}
    small = ((Regime.BATCH1_DECODE, 1, 16),)
    for system in systems:
        hw = load_hardware(SYSTEMS[system])
        for name in engines:
            engine = Engine(name)
            t = load_tables(system, engine, default_version(system, engine),
                            frozenset({"gemm", "context_attention", "generation_attention",
                                       "context_mla_module", "generation_mla_module", "moe",
                                       "custom_allreduce", "nccl"}))
            _gemm(builders["hbm_floor"], t, hw, small)
            _gemm(builders["dense_gemm"], t, hw, GEMM_REGIMES)
            _moe(builders["moe_gemm"], t, hw, MOE_REGIMES, ep_imbalance)
            _gqa_attention(builders["gqa_prefill"], t, hw)
            _mla(builders["mla_prefill"], t, hw, decode=False)
            _gqa_decode(builders["gqa_decode"], t, hw, DECODE_REGIMES)
            _mla(builders["mla_decode"], t, hw, decode=True, regimes=DECODE_REGIMES)
            _allreduce(builders["allreduce"], t, hw)
            if name == ENGINES[0]:  # NCCL's tables are shared by every engine of a system
                _alltoall(builders["alltoall"], t, hw)
    return {c: b.build() for c, b in builders.items()}
