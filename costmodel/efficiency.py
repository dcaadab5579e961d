"""Efficiency factors and fixed latencies: every number a pure roofline misses.

One global set: the compute and bandwidth factors per operation class fitted on
measured kernel tables (`costmodel/calibration.py`), the per-kernel floor on the
published deployments of `benchmarks/validate_deployments.py`, the rest sourced;
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


# Fractions of a peak: each in (0, 1].
_FRACTIONS = ("compute", "compute_moe", "compute_attn_gqa", "compute_attn_mla", "hbm",
              "scale_up", "scale_out")


@dataclass(frozen=True)
class Efficiency:
    # Achieved fractions of peak FLOP/s per operation class, and of HBM bandwidth: the
    # output of `python benchmarks/calibrate_roofline.py` (costmodel/calibration.py), fitted
    # on aiconfigurator-core 0.12's measured kernel tables (H100, H200, B200, GB200 under
    # TensorRT-LLM, SGLang and vLLM) as the grid value minimising the summed squared
    # log(roofline / measured) in each class's compute-bound regime; per-class and
    # leave-one-GPU-out figures in docs/costmodel.md, "Calibration and validation".
    # tests/unit/test_calibration.py re-derives them from the tables.
    # Dense GEMMs (projections, dense FFN, shared experts, LM head) at m = 2k-16k tokens
    # (0.40 before, set by hand on the six compute-bound published cases).
    compute: float = 0.54
    # Grouped expert GEMMs at >= 512 tokens per expert (power-law routing, on top of
    # `ep_imbalance`); wide-EP prefill runs many more tokens per expert than the tables hold.
    compute_moe: float = 0.25
    # Scores and values over the context (MLA's projections priced at `compute`), fitted
    # on prefill kernels at 1k-16k tokens, and used for decode too: a mixed step prices
    # its fills' and decodes' attention together. The MLA block in decode fits at 0.37
    # (batch 64-512, 2k-16k context); GQA decode is bandwidth-bound in every table.
    compute_attn_gqa: float = 0.41
    compute_attn_mla: float = 0.36
    # HBM bandwidth: dense GEMMs at m = 1-16 reading >= 50 us of weights (where a kernel's
    # floor barely counts); FlashMLA reports 3,000 GB/s of 3,350 (0.90) in its best case.
    hbm: float = 0.79
    # Achieved fraction of scale-up (NVLink) bandwidth per direction: DeepEP measures
    # 153-158 GB/s intranode on H800, whose NVLink gives 200 GB/s per direction.
    scale_up: float = 0.78
    # Achieved fraction of scale-out (NIC) bandwidth: DeepEP measures 43-47 GB/s over
    # 400 Gb/s (50 GB/s) InfiniBand.
    scale_out: float = 0.90
    # Busiest EP rank over the mean: expert load balancing (EPLB, redundant experts)
    # leaves a residual imbalance; DeepSeek's EPLB reports balance within ~10-20%.
    ep_imbalance: float = 1.15
    # Per kernel on a layer's critical path: the time a small kernel takes beyond its
    # bytes inside a CUDA-graph step. The tables time kernels one at a time and put it at
    # 10.5 us (dense GEMMs at m = 1-16, at the `hbm` above); engines overlap launches, and
    # the rule of costmodel/validation.py (`fit_launch`) fits it on the 14 published
    # cases instead (5.25 us on all of them and on the 8 decode cases at batch 1-2). Kernels per layer: TensorRT-LLM's min-latency DeepSeek-R1 post lists 13 on
    # an MLA + MoE layer's path (read here as 7 for MLA, 6 for the MoE FFN), a GQA +
    # dense layer has about 6 (QKV, attention, output; gate-up, activation, down).
    kernel_launch_s: float = 5.25e-6
    kernels_attn_mla: float = 7.0
    kernels_attn_gqa: float = 3.0
    kernels_ffn_moe: float = 6.0
    kernels_ffn_dense: float = 3.0
    # Per TP collective: the floor under the engines' custom all-reduce on 2-8 GPUs in the
    # tables (fitted with its bandwidth, 0.65 of one direction of NVLink; `scale_up` keeps
    # DeepEP's all-to-all figure, the larger traffic of an MoE step).
    tp_collective_s: float = 5e-6
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
        for name in (*_FRACTIONS, "idle_power_fraction", "overlap_fraction"):
            value = getattr(self, name)
            if name in _FRACTIONS and value == 0:
                raise CostModelError(f"efficiency.{name}: expected > 0, got {value!r}")
            if value > 1:
                raise CostModelError(f"efficiency.{name}: expected <= 1, got {value!r}")
        if self.ep_imbalance < 1:
            raise CostModelError(f"efficiency.ep_imbalance: expected >= 1, got {self.ep_imbalance}")


DEFAULT_EFFICIENCY = Efficiency()
