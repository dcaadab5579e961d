"""Published deployments, reproduced from their configurations (REFERENCE.md).

Each case rebuilds a measured system's layout and workload and predicts the
figure that was measured; `predict_all()` returns predicted/measured ratios.
Decode cases pick the largest batch per GPU whose predicted time per output
token meets the measured per-user speed, as an operator tuning to that SLO would.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.efficiency import DEFAULT_EFFICIENCY, Efficiency
from costmodel.hardware import HardwareTable, load_hardware
from costmodel.layout import Layout, check_layout
from costmodel.model import load_model
from costmodel.phase import Configs, Phase, phase_cost
from costmodel.precision import Precision


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    hardware: str
    phase: Phase
    layout: Layout
    new_tokens: int
    context: int
    measured_tokens_per_s_per_node: float
    batch: int | None = None  # fixed batch per GPU; None: largest meeting `tpot_s`
    tokens_per_gpu_step: int = 16384  # fills: tokens per GPU per micro-batch
    tpot_s: float | None = None
    gpus_per_node: int = 8


DEEPSEEK_DAY6 = "deepseek-ai/open-infra-index, Day 6 inference system overview"
LMSYS = "LMSYS blog, large-scale expert parallelism, 2025-05-05"
# DeepSeek production: 56.3% of input tokens hit the on-disk KV cache; the one length
# published is the average KV length per output token (4,989), taken as the prompt.
_DS_NEW = round(4989 * (1 - 0.563))

CASES = (
    Case("DeepSeek-V3 prod prefill (H800, EP32), new tokens", DEEPSEEK_DAY6, "h800",
         Phase.MIDFILL, Layout(ep=32), _DS_NEW, 4989 - _DS_NEW, 32_200),
    Case("DeepSeek-V3 prod decode (H800, EP144, MTP), 20-22 tok/s/user", DEEPSEEK_DAY6,
         "h800", Phase.DECODE, Layout(ep=144, mtp=1), 1, 4989, 14_800, tpot_s=1 / 21),
    Case("SGLang prefill 1K (H100, EP32)", LMSYS, "h100", Phase.PREFILL, Layout(ep=32),
         1024, 0, 57_674),
    Case("SGLang prefill 2K (H100, EP32)", LMSYS, "h100", Phase.PREFILL, Layout(ep=32),
         2048, 0, 54_543),
    Case("SGLang prefill 4K (H100, EP32)", LMSYS, "h100", Phase.PREFILL, Layout(ep=32),
         4096, 0, 50_302),
    Case("SGLang decode 2K, batch 256/GPU (H100, EP72)", LMSYS, "h100", Phase.DECODE,
         Layout(ep=72), 1, 2000, 22_282, batch=256),
)


@dataclass(frozen=True)
class Prediction:
    case: Case
    batch: int
    predicted_tokens_per_s_per_node: float

    @property
    def ratio(self) -> float:
        return self.predicted_tokens_per_s_per_node / self.case.measured_tokens_per_s_per_node


def predict(case: Case, eff: Efficiency = DEFAULT_EFFICIENCY) -> Prediction:
    model = load_model("deepseek-v3")
    hw = load_hardware(case.hardware)
    check_layout(model, hw, case.layout)
    if case.phase is Phase.DECODE:
        batches = np.arange(1, 1025) if case.batch is None else np.array([case.batch])
    else:
        batches = np.array([max(1, case.tokens_per_gpu_step // case.new_tokens)])
    lay = case.layout
    cfg = Configs.make(phase=int(case.phase), batch=batches, new_tokens=case.new_tokens,
                       context=case.context, pp=lay.pp, tp=lay.tp, ep=lay.ep,
                       precision=int(Precision.FP8), kv_precision=int(lay.kv), mtp=lay.mtp)
    cost = phase_cost(model, HardwareTable((hw,)), cfg, eff)
    ok = cost.fits.copy()
    if case.tpot_s is not None:
        ok &= cost.tpot_s <= case.tpot_s
    if not ok.any():
        raise ValueError(f"{case.name}: no batch meets the constraints")
    i = int(np.flatnonzero(ok)[-1])
    per_node = cost.tokens_per_s_per_gpu[i] * case.gpus_per_node
    return Prediction(case, int(batches[i]), float(per_node))


def predict_all(eff: Efficiency = DEFAULT_EFFICIENCY) -> list[Prediction]:
    return [predict(c, eff) for c in CASES]
