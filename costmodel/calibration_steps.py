"""Whole steps: the roofline's step time against the measured tables' composition.

Per-kernel fits (`costmodel/calibration.py`) say how each class lands; this says
how a step lands, on the layouts issue 33 measured: DeepSeek-V3 fp8 at attention
TP8 or DP8 with EP8, Llama-3.1-70B fp8 at TP1-TP4, in three regimes (a prompt's
prefill, decode at a large batch, decode at batch 1). The table side is
`costmodel/measured/compose.py`'s composition (within 5% of aiconfigurator's own
estimate on these layouts, tests/unit/test_measured_compose.py), under
TensorRT-LLM at each system's default version; the roofline side is
`costmodel.phase.phase_cost` without the host gap (the tables' composition has
none). Needs the `measured` extra.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from costmodel.calibration import SYSTEMS, Regime
from costmodel.efficiency import Efficiency
from costmodel.hardware import HardwareTable, load_hardware
from costmodel.model import load_model
from costmodel.phase import Configs, Phase, phase_cost
from costmodel.precision import Precision

# The factors shipped before the per-class calibration (costmodel.calibration.
# PRE_CALIBRATION) as a whole `Efficiency` (12 kernels a layer:
# 6 + 6), for whole steps.
PRE_CALIBRATION_EFFICIENCY = Efficiency(
    compute=0.40, compute_moe=0.40, compute_attn_gqa=0.40, compute_attn_mla=0.40, hbm=0.80,
    kernel_launch_s=1.5e-6, kernels_attn_mla=6.0, kernels_attn_gqa=6.0, kernels_ffn_moe=6.0,
    kernels_ffn_dense=6.0, tp_collective_s=12e-6)


@dataclass(frozen=True)
class StepCase:
    model: str
    tp: int
    ep: int
    dp: int  # attention data-parallel ranks (tp x dp GPUs)
    regime: Regime
    batch: int  # sequences per attention rank
    isl: int

    @property
    def label(self) -> str:
        par = f"TP{self.tp}" if self.dp == 1 else f"DP{self.dp}"
        ep = f" EP{self.ep}" if self.ep > 1 else ""
        return f"{self.model} {par}{ep} batch {self.batch} isl {self.isl}"


_DS, _LL = "deepseek-v3", "llama-3.1-70b"
STEP_CASES = (
    StepCase(_DS, 8, 8, 1, Regime.PREFILL, 1, 8192),
    StepCase(_DS, 1, 8, 8, Regime.PREFILL, 1, 8192),
    StepCase(_LL, 1, 1, 1, Regime.PREFILL, 1, 8192),
    StepCase(_LL, 2, 1, 1, Regime.PREFILL, 1, 8192),
    StepCase(_DS, 8, 8, 1, Regime.LARGE_DECODE, 128, 4096),
    StepCase(_DS, 1, 8, 8, Regime.LARGE_DECODE, 64, 4096),
    StepCase(_LL, 2, 1, 1, Regime.LARGE_DECODE, 64, 4096),
    StepCase(_LL, 4, 1, 1, Regime.LARGE_DECODE, 128, 4096),
    StepCase(_DS, 8, 8, 1, Regime.BATCH1_DECODE, 1, 4096),
    StepCase(_DS, 1, 8, 8, Regime.BATCH1_DECODE, 1, 4096),
    StepCase(_LL, 2, 1, 1, Regime.BATCH1_DECODE, 1, 4096),
    StepCase(_LL, 4, 1, 1, Regime.BATCH1_DECODE, 1, 4096),
)


def roofline_step_s(case: StepCase, hardware: str, eff: Efficiency) -> float:
    decode = case.regime is not Regime.PREFILL
    fp8 = int(Precision.FP8)
    cfg = Configs.make(phase=int(Phase.DECODE if decode else Phase.PREFILL),
                       batch=np.array([case.batch]), new_tokens=1 if decode else case.isl,
                       context=case.isl if decode else 0, pp=1, tp=case.tp, ep=case.ep,
                       precision=fp8, kv_precision=fp8, mtp=0, attention_precision=fp8)
    cost = phase_cost(load_model(case.model), HardwareTable((load_hardware(hardware),)), cfg,
                      replace(eff, step_overhead_s=0.0))
    return float(cost.step_time_s[0])


def table_step_s(case: StepCase, tables) -> float | None:
    """`tables`: the GQA families' tables and the MLA-and-experts families' (`step_ratios`).
    DeepSeek-V3 is composed as MLA with routed experts on fp8 blocks (bf16 FMHA), Llama as
    dense GQA on fp8 throughout."""
    from costmodel.measured.compose import Dtypes, Layout, gqa_step
    from costmodel.measured.compose import Phase as MPhase
    from costmodel.measured.compose_mla import mla_moe_step

    mla = case.model == _DS
    step, family_tables = (mla_moe_step, tables[1]) if mla else (gqa_step, tables[0])
    gemm = "fp8_block" if mla else "fp8"
    terms = step(family_tables, load_model(case.model),
                 Layout(tp=case.tp, ep=case.ep, dp_attention=case.dp),
                 Dtypes(gemm=gemm, moe=gemm, kv="fp8", fmha="bfloat16" if mla else "fp8"),
                 MPhase.PREFILL if case.regime is Regime.PREFILL else MPhase.DECODE,
                 case.batch, case.isl)
    total = terms.total_s()
    return None if total is None else float(total[0])


@dataclass(frozen=True)
class StepRatio:
    case: StepCase
    system: str
    table_s: float
    ratios: tuple[float, ...]  # roofline / table per efficiency set given


def step_ratios(effs: tuple[Efficiency, ...], systems=tuple(SYSTEMS)) -> list[StepRatio]:
    """Roofline step / table step per case and system, at each efficiency set."""
    from costmodel.measured.catalog import Engine, default_version
    from costmodel.measured.tables import GQA_FAMILIES, MLA_MOE_FAMILIES, load_tables

    out = []
    for system in systems:
        version = default_version(system, Engine.TRTLLM)
        tables = (load_tables(system, Engine.TRTLLM, version, GQA_FAMILIES),
                  load_tables(system, Engine.TRTLLM, version, MLA_MOE_FAMILIES))
        for case in STEP_CASES:
            t = table_step_s(case, tables)
            if t is None:
                continue
            out.append(StepRatio(case, system, t, tuple(
                roofline_step_s(case, SYSTEMS[system], e) / t for e in effs)))
    return out
