"""Efficiency factors and fixed latencies: every number a pure roofline misses.

One global set, calibrated once against the published deployments of
`benchmarks/validate_deployments.py` (DeepSeek-V3 on H800, SGLang on H100);
each value says where it came from. There are no per-case factors: a user who
knows their stack better passes their own `Efficiency`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from enum import IntEnum

from costmodel.errors import CostModelError
from costmodel.mtp import DEEPSEEK_V3_ACCEPTANCE


class OverlapMode(IntEnum):
    """How communication meets compute inside a pipeline stage (Calculon's named mode)."""

    SERIAL = 0  # compute, then communicate: times add
    OVERLAP = 1  # two micro-batches interleaved (two-batch overlap): part of it hides


@dataclass(frozen=True)
class Efficiency:
    # Achieved fraction of peak dense FLOP/s over a serving step's GEMMs and attention.
    # Big FP8 GEMMs reach ~0.68 (DeepGEMM: 1,350+ TFLOPS on H800), but a step mixes
    # small grouped GEMMs, BF16 attention and glue kernels. The one calibrated factor,
    # set by hand on the six compute-bound cases of costmodel/validation.py (all within
    # 0.975-1.343x at 0.40). The stated rule there (least squares in log ratio) gives 0.36
    # on those six and 0.34 with the memory/latency-bound cases added (the 64k-context
    # one, whose MLA attention is FLOP-heavy, pulls it); batch-1 decode barely depends on
    # it. Per-case and leave-one-out figures: docs/costmodel.md.
    compute: float = 0.40
    # Achieved fraction of HBM bandwidth. FlashMLA reports 3,000 GB/s of 3,350 (90%) in the
    # memory-bound decode configuration; other kernels do less.
    hbm: float = 0.80
    # Achieved fraction of scale-up (NVLink) bandwidth per direction: DeepEP measures
    # 153-158 GB/s intranode on H800, whose NVLink gives 200 GB/s per direction.
    scale_up: float = 0.78
    # Achieved fraction of scale-out (NIC) bandwidth: DeepEP measures 43-47 GB/s over
    # 400 Gb/s (50 GB/s) InfiniBand.
    scale_out: float = 0.90
    # Busiest EP rank over the mean: expert load balancing (EPLB, redundant experts)
    # leaves a residual imbalance; DeepSeek's EPLB reports balance within ~10-20%.
    ep_imbalance: float = 1.15
    # Per layer: kernel launches that are not hidden (CUDA graphs in decode leave
    # ~1-2 us each, about 12 kernels a layer). Batch-1 decode steps measured by the
    # validation cases imply ~4 us per small kernel and 13 kernels per MLA + MoE layer
    # against ~6 per GQA + dense one (docs/costmodel.md, "Why the fixed latencies were
    # left as they are"); no public source gives that floor apart from those cases.
    kernel_launch_s: float = 1.5e-6
    kernels_per_layer: float = 12.0
    # Per TP collective (NCCL all-reduce of a small message on NVLink: ~10-20 us).
    tp_collective_s: float = 12e-6
    # Fixed part of one EP dispatch or combine inside the scale-up domain, and across
    # it (DeepEP low-latency kernels: ~160-370 us at 128 tokens/GPU, mostly bytes; the
    # floor under them is tens of microseconds).
    a2a_scale_up_s: float = 15e-6
    a2a_scale_out_s: float = 35e-6
    # One pipeline hop (activation send between stages).
    pp_hop_s: float = 10e-6
    # Host and scheduler gap per step (batch formation, sampling, launch): ~1-3 ms in
    # vLLM/SGLang without overlapped scheduling.
    step_overhead_s: float = 1.5e-3
    # Host gap per MTP draft pass (its sampling, copies and launch): 0 here; an engine
    # sets it (costmodel/data/engines.toml, costmodel/engines.py).
    draft_overhead_s: float = 0.0
    # Multi-token prediction: conditional acceptance of each draft position (position 1 =
    # the first draft), sourced in costmodel/mtp.py: DeepSeek-V3's 85-90% for the first,
    # TensorRT-LLM's measured acceptance lengths of DeepSeek-R1 for the rest.
    mtp_acceptance: tuple[float, ...] = DEEPSEEK_V3_ACCEPTANCE
    # Activation reads and writes per token per layer, in hidden-size vectors
    # (norms, residual adds, projections in and out).
    activation_passes_per_layer: float = 10.0
    # GPU power at idle as a fraction of TDP; the rest scales with utilisation.
    idle_power_fraction: float = 0.30
    overlap: OverlapMode = OverlapMode.OVERLAP
    # In OVERLAP mode, the fraction of the shorter of (compute+memory, communication)
    # that hides behind the longer. LMSYS reports two-batch overlap raising throughput
    # "by up to 35%" over no overlap on 96 H100s: 2 / (2 - f) = 1.35 gives f ~ 0.5.
    overlap_fraction: float = 0.5

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("overlap", "mtp_acceptance"):
                continue
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise CostModelError(f"efficiency.{f.name}: expected a number >= 0, got {value!r}")
        probs = self.mtp_acceptance
        if not isinstance(probs, tuple) or not probs or not all(
                isinstance(p, (int, float)) and 0 <= p <= 1 for p in probs):
            raise CostModelError(f"efficiency.mtp_acceptance: expected a non-empty tuple of "
                                 f"probabilities in [0, 1], got {probs!r}")
        for name in ("compute", "hbm", "scale_up", "scale_out",
                     "idle_power_fraction", "overlap_fraction"):
            value = getattr(self, name)
            if name in ("compute", "hbm", "scale_up", "scale_out") and value == 0:
                raise CostModelError(f"efficiency.{name}: expected > 0, got {value!r}")
            if value > 1:
                raise CostModelError(f"efficiency.{name}: expected <= 1, got {value!r}")
        if self.ep_imbalance < 1:
            raise CostModelError(f"efficiency.ep_imbalance: expected >= 1, got {self.ep_imbalance}")


DEFAULT_EFFICIENCY = Efficiency()
