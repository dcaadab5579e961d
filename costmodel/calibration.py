"""The roofline's efficiencies fitted per operation class against the measured tables.

Where no measured table prices a kernel (TOML hardware, MI355X, layouts outside
the tables, a default install without the `measured` extra), the roofline of
`costmodel/kernels.py` prices it: FLOPs over a fraction of peak, bytes over a
fraction of HBM bandwidth, plus fixed latencies. The kernel tables of
aiconfigurator-core (`costmodel/measured/`) are sampled on several GPUs and
engines, every sample priced with that same roofline (our hardware presets' peaks, our
model's shapes), and each class's factor is fitted as the value on a 0.01 grid (the
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
- ``moe_gemm``: grouped MoE GEMMs (power-law routing, as engines see it) at >= 512
  tokens per expert: `compute_moe`.
- ``gqa_prefill``: causal prefill attention kernels, head dim 128, 1k-16k tokens:
  `compute_attn_prefill_gqa`.
- ``mla_prefill``: the whole DeepSeek MLA block in prefill (projections at the
  fitted `compute`, the rest at this factor), 1k-16k tokens: `compute_attn_prefill_mla`.
- ``gqa_decode`` / ``mla_decode``: decode attention (GQA kernel; the whole MLA
  block) at batch 64-512, 2k-16k context: `compute_attn_decode_gqa` / `_mla`.
- ``allreduce``: the engine's custom all-reduce on 2-8 GPUs, 8 KB-128 MB: its
  bandwidth (reported) and the floor `tp_collective_s`.
- ``alltoall``: NCCL's all-to-all on 2-8 GPUs, 8 KB-128 MB: bandwidth and floor,
  reported beside DeepEP's `scale_up` and `a2a_scale_up_s`.

The samples are read and priced in `costmodel/calibration_samples.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.calibration_samples import (  # noqa: F401  (collect, SYSTEMS: the entry points)
    SYSTEMS,
    Regime,
    Samples,
    collect,
)

EFF_GRID = np.round(np.arange(0.05, 1.0001, 0.01), 2)
FLOOR_GRID_S = np.arange(0.0, 20.0001, 0.25) * 1e-6


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
    # Reported, not shipped (`scale_up` and `a2a_scale_up_s` are DeepEP's figures).
    scale_up_a2a: float
    a2a_scale_up_s: float


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
    a2a = samples["alltoall"]
    su_a2a = fit_memory(a2a.take(a2a.bytes_s >= BIG_S), 1.0, 1.0, 0.0)
    a2a_floor = fit_floor(a2a, 1.0, 1.0, su_a2a)
    # GQA decode attention is bandwidth-bound at every batch the tables hold (16 FLOPs
    # per KV byte at 8 query heads per KV head): its compute factor is not identifiable
    # there and is set to the prefill one.
    return Fit(hbm=hbm, kernel_launch_s=floor_s, compute=compute, compute_moe=moe,
               compute_attn_prefill_gqa=gqa_p, compute_attn_prefill_mla=mla_p,
               compute_attn_decode_gqa=gqa_p, compute_attn_decode_mla=mla_d,
               scale_up=su, tp_collective_s=tp_floor, scale_up_a2a=su_a2a,
               a2a_scale_up_s=a2a_floor)


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
           "allreduce": 1.0, "alltoall": 1.0}[cls]
    if cls == "allreduce":
        return 1.0, 1.0, f.scale_up, f.tp_collective_s
    if cls == "alltoall":  # an `Efficiency` prices it with `scale_up`
        return 1.0, 1.0, getattr(f, "scale_up_a2a", f.scale_up), f.a2a_scale_up_s
    return own, f.compute, f.hbm, f.kernel_launch_s


def ratios(samples: Samples, cls: str, f) -> np.ndarray:
    """predicted / measured per sample at the factors of `f`."""
    return predict_s(samples, *class_factors(cls, f)) / samples.measured_s


# The factors shipped before this calibration (one compute fraction for every class,
# the 12-kernel layer at 1.5 us), to report what it changed.
PRE_CALIBRATION = Fit(hbm=0.80, kernel_launch_s=1.5e-6, compute=0.40, compute_moe=0.40,
                      compute_attn_prefill_gqa=0.40, compute_attn_prefill_mla=0.40,
                      compute_attn_decode_gqa=0.40, compute_attn_decode_mla=0.40,
                      scale_up=0.78, tp_collective_s=12e-6, scale_up_a2a=0.78,
                      a2a_scale_up_s=15e-6)


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
