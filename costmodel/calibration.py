"""The roofline's efficiencies fitted per operation class against the measured tables.

Where no measured table prices a kernel (TOML hardware, MI355X, layouts outside
the tables, a default install without the `measured` extra), the roofline of
`costmodel/kernels.py` prices it: FLOPs over a fraction of peak, bytes over a
fraction of HBM bandwidth, plus fixed latencies. This module samples the kernel
tables of aiconfigurator-core (`costmodel/measured/`) on several GPUs and engines,
prices every sample with that same roofline (our hardware presets' peaks, our
model's shapes), and fits each class's factor as the value on a 0.01 grid (the
floors on a 0.25 us grid) that minimises the summed squared log(predicted /
measured) over the class's samples in its regime. `benchmarks/calibrate_roofline.py`
prints the fit, per-regime ratios at the old and the fitted factors, and the
leave-one-GPU-out figures; the shipped defaults in `costmodel/efficiency.py` are
its output, which `tests/unit/test_calibration.py` re-derives.

Needs the extra (`pip install 'tokenfactory[measured]'`); only the calibration
imports it, the roofline does not.

Classes, the samples they are fitted on and the factor they set:

- ``hbm_floor``: dense GEMMs at m = 1-16 tokens (weight-read bound): `hbm` on those
  reading >= 50 us of weights, then an isolated kernel's floor on all of them (reported:
  the shipped `kernel_launch_s` is fitted on published steps, costmodel/validation.py).
- ``dense_gemm``: dense GEMMs at m = 2,048-16,384: `compute`.
- ``moe_gemm``: grouped MoE GEMMs (power-law routing, as engines see it) at
  4,096-16,384 tokens entering the EP group: `compute_moe`.
- ``gqa_prefill``: causal prefill attention kernels, head dim 128, 1k-16k tokens:
  `compute_attn_prefill_gqa`.
- ``mla_prefill``: the whole DeepSeek MLA block in prefill (projections at the
  fitted `compute`, the rest at this factor), 1k-16k tokens: `compute_attn_prefill_mla`.
- ``gqa_decode`` / ``mla_decode``: decode attention (GQA kernel; the whole MLA
  block) at batch 64-512, 2k-16k context: `compute_attn_decode_gqa` / `_mla`.
- ``allreduce``: the engine's custom all-reduce on 2-8 GPUs, 8 KB-128 MB:
  `scale_up` and `tp_collective_s`, fitted jointly.
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
EFF_GRID = np.round(np.arange(0.05, 1.0001, 0.01), 2)
FLOOR_GRID_S = np.arange(0.0, 20.0001, 0.25) * 1e-6
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


def predict_s(s: Samples, eff: float, fixed_eff: float, hbm: float, floor_s: float):
    """The roofline's time: max(compute, memory) plus one kernel floor (broadcasts over
    arrays of factors)."""
    compute = s.fixed_s / fixed_eff + s.flops_s / eff
    return np.maximum(compute, s.bytes_s / hbm) + floor_s


def _sse(pred: np.ndarray, measured: np.ndarray) -> np.ndarray:
    return (np.log(pred / measured) ** 2).sum(axis=-1)


def fit_compute(s: Samples, fixed_eff: float, hbm: float, floor_s: float) -> float:
    """The compute factor on EFF_GRID minimising the summed squared log ratio."""
    pred = predict_s(s, EFF_GRID[:, None], fixed_eff, hbm, floor_s)
    return float(EFF_GRID[int(np.argmin(_sse(pred, s.measured_s)))])


def fit_memory(s: Samples, eff: float, fixed_eff: float, floor_s: float) -> float:
    """The bandwidth factor on EFF_GRID minimising the summed squared log ratio."""
    pred = predict_s(s, eff, fixed_eff, EFF_GRID[:, None], floor_s)
    return float(EFF_GRID[int(np.argmin(_sse(pred, s.measured_s)))])


def fit_floor(s: Samples, eff: float, fixed_eff: float, hbm: float) -> float:
    """The floor (seconds) on FLOOR_GRID_S minimising the summed squared log ratio."""
    pred = predict_s(s, eff, fixed_eff, hbm, FLOOR_GRID_S[:, None])
    return float(FLOOR_GRID_S[int(np.argmin(_sse(pred, s.measured_s)))])


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
    """Grouped expert GEMMs, priced as `_Kernels` prices routed experts."""
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


CLASSES = ("hbm_floor", "dense_gemm", "moe_gemm", "gqa_prefill", "mla_prefill", "gqa_decode",
           "mla_decode", "allreduce")
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
                                       "custom_allreduce"}))
            _gemm(builders["hbm_floor"], t, hw, small)
            _gemm(builders["dense_gemm"], t, hw, GEMM_REGIMES)
            _moe(builders["moe_gemm"], t, hw, MOE_REGIMES, ep_imbalance)
            _gqa_attention(builders["gqa_prefill"], t, hw)
            _mla(builders["mla_prefill"], t, hw, decode=False)
            _gqa_decode(builders["gqa_decode"], t, hw, DECODE_REGIMES)
            _mla(builders["mla_decode"], t, hw, decode=True, regimes=DECODE_REGIMES)
            _allreduce(builders["allreduce"], t, hw)
    return {c: b.build() for c, b in builders.items()}


@dataclass(frozen=True)
class Fit:
    """The fitted factors (named as `Efficiency`'s fields; the attention ones are
    `compute_attn_gqa` and `_mla` there, the prefill fits, decode reported only)."""

    hbm: float
    kernel_launch_s: float
    compute: float
    compute_moe: float
    compute_attn_prefill_gqa: float
    compute_attn_prefill_mla: float
    compute_attn_decode_gqa: float
    compute_attn_decode_mla: float
    scale_up: float
    tp_collective_s: float


def _regime(s: Samples, regime: Regime) -> Samples:
    return s.take(s.regime == regime.value)


# GEMMs at m = 1-16 whose weights alone take this long to read at full bandwidth (167 MB
# and more on H100) fix `hbm`: a floor of ~10 us moves them by less than a fifth.
BIG_READ_S = 50e-6
# All-reduces whose bytes alone take this long at full scale-up bandwidth fix its
# factor; a floor of a few microseconds barely moves them.
BIG_S = 120e-6


def fit(samples: dict) -> Fit:
    """Fit in dependency order, one factor at a time: bandwidth on big memory-bound
    kernels, then the floor on all small ones, then each compute factor on its class's
    compute-bound regime with the others held."""
    small = samples["hbm_floor"]
    hbm = fit_memory(small.take(small.bytes_s >= BIG_READ_S), 1.0, 1.0, 0.0)
    floor_s = fit_floor(small, 1.0, 1.0, hbm)
    compute = fit_compute(_regime(samples["dense_gemm"], Regime.PREFILL), 1.0, hbm, floor_s)
    moe = fit_compute(_regime(samples["moe_gemm"], Regime.PREFILL), 1.0, hbm, floor_s)
    gqa_p = fit_compute(samples["gqa_prefill"], 1.0, hbm, floor_s)
    mla_p = fit_compute(samples["mla_prefill"], compute, hbm, floor_s)
    mla_d = fit_compute(_regime(samples["mla_decode"], Regime.LARGE_DECODE), compute, hbm,
                        floor_s)
    ar = samples["allreduce"]
    su = fit_memory(ar.take(ar.bytes_s >= BIG_S), 1.0, 1.0, 0.0)
    tp_floor = fit_floor(ar, 1.0, 1.0, su)
    # GQA decode attention is bandwidth-bound at every batch the tables hold (16 FLOPs
    # per KV byte at 8 query heads per KV head): its compute factor is not identifiable
    # there and is set to the prefill one.
    return Fit(hbm=hbm, kernel_launch_s=floor_s, compute=compute, compute_moe=moe,
               compute_attn_prefill_gqa=gqa_p, compute_attn_prefill_mla=mla_p,
               compute_attn_decode_gqa=gqa_p, compute_attn_decode_mla=mla_d,
               scale_up=su, tp_collective_s=tp_floor)


# Per class: (the factor pricing its own FLOPs, the one pricing `fixed_s`, bandwidth,
# floor), read from an object with `Fit`'s field names (a `Fit` or an `Efficiency`).
def class_factors(cls: str, f) -> tuple[float, float, float, float]:
    # An `Efficiency` has one attention factor per kind (`compute_attn_gqa`, `_mla`).
    gqa_p = getattr(f, "compute_attn_prefill_gqa", None) or f.compute_attn_gqa
    mla_p = getattr(f, "compute_attn_prefill_mla", None) or f.compute_attn_mla
    own = {"hbm_floor": f.compute, "dense_gemm": f.compute, "moe_gemm": f.compute_moe,
           "gqa_prefill": gqa_p, "mla_prefill": mla_p,
           "gqa_decode": getattr(f, "compute_attn_decode_gqa", None) or gqa_p,
           "mla_decode": getattr(f, "compute_attn_decode_mla", None) or mla_p,
           "allreduce": 1.0}[cls]
    if cls == "allreduce":
        return 1.0, 1.0, f.scale_up, f.tp_collective_s
    return own, f.compute, f.hbm, f.kernel_launch_s


def ratios(samples: Samples, cls: str, f) -> np.ndarray:
    """predicted / measured per sample at the factors of `f`."""
    return predict_s(samples, *class_factors(cls, f)) / samples.measured_s


# The factors shipped before this calibration (one compute fraction for every class,
# the 12-kernel layer at 1.5 us), to report what it changed.
PRE_CALIBRATION = Fit(hbm=0.80, kernel_launch_s=1.5e-6, compute=0.40, compute_moe=0.40,
                      compute_attn_prefill_gqa=0.40, compute_attn_prefill_mla=0.40,
                      compute_attn_decode_gqa=0.40, compute_attn_decode_mla=0.40,
                      scale_up=0.78, tp_collective_s=12e-6)


@dataclass(frozen=True)
class HeldOut:
    gpu: str
    fit: Fit  # fitted without this GPU's samples
    median: float  # predicted / measured on the held-out GPU, per regime
    lo: float
    hi: float
    regime: str
    cls: str


def leave_one_gpu_out(samples: dict) -> list[HeldOut]:
    """Fit on every GPU but one, predict that GPU's samples: per class and regime the
    median and range of predicted / measured."""
    out = []
    gpus = sorted({g for s in samples.values() for g in s.gpu})
    for gpu in gpus:
        f = fit({c: s.take(s.gpu != gpu) for c, s in samples.items()})
        for cls, s in samples.items():
            mine = s.take(s.gpu == gpu)
            for regime in Regime:
                part = _regime(mine, regime)
                if len(part.measured_s):
                    r = ratios(part, cls, f)
                    out.append(HeldOut(gpu, f, float(np.median(r)), float(r.min()),
                                       float(r.max()), regime.value, cls))
    return out
