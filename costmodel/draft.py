"""MTP draft passes: what drafting `mtp` tokens costs in each decode step.

DeepSeek-V3's MTP module (arXiv 2412.19437, section 2.2) is one transformer block
of the main model's kind (MLA attention and an MoE FFN), a projection of the
concatenated hidden state and next-token embedding (2d x d), and the main model's
embedding and output head, shared. Engines draft k tokens by running that module
k times in a row after the step's main pass: TensorRT-LLM's "MTP Eagle", its
default for DeepSeek, reuses the one shipped module for every draft, its first
pass taking the tokens the step accepted (the module's own KV cache needs them),
each later pass the last draft alone
(https://github.com/NVIDIA/TensorRT-LLM/blob/main/docs/source/blogs/tech_blog/blog2_DeepSeek_R1_MTP_Implementation_and_Optimization.md);
SGLang's EAGLE worker runs the module the same way. So a step with k drafts costs
the main pass (verifying 1 + k tokens) plus k draft passes.

Each draft pass is priced with the main pass's own terms (`costmodel/terms.py`)
on a one-layer model: attention over the context with the module's KV, the
routed and shared experts its tokens touch, the 2d x d projection, the LM head
on one token per sequence, one layer's TP all-reduces and EP all-to-all, and one
layer's fixed latencies. The module's weights use the layout's precisions.
A model that ships no MTP module but is run with `mtp` > 0 gets the same
one-block draft (EAGLE-style draft heads are one decoder layer too).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from costmodel.configs import Configs, Phase
from costmodel.efficiency import Efficiency
from costmodel.hardware import HardwareTable
from costmodel.kernels import Kernels, Shape
from costmodel.model_spec import ModelSpec
from costmodel.terms import NUMPY_OPS, Ops, Roof, fixed_latency, gemm, network, overlapped


@cache
def mtp_module(model: ModelSpec) -> ModelSpec:
    """The draft block as a one-layer model: one full-attention layer of the model's
    attention kind, with an MoE FFN when the model routes experts, else a dense one."""
    return replace(model, name=f"{model.name}/mtp", n_full_layers=1, n_sliding_layers=0,
                   n_linear_layers=0, n_dense_layers=0 if model.moe is not None else 1,
                   mtp_layers=0)


@dataclass(frozen=True)
class DraftCost:
    time_s: np.ndarray  # all the step's draft passes, one after another
    flops_per_gpu: np.ndarray  # on each GPU of the stage that holds the module
    hbm_read_bytes_per_gpu: np.ndarray


def head_and_projection(block: ModelSpec, lay, b, ops: Ops = NUMPY_OPS) -> tuple[Roof, Roof]:
    """A draft pass's own groups beside the block's kernels: the LM head on one token
    per sequence, and the projection of [hidden; embedding] (2d x d) to hidden."""
    d = float(block.hidden_size)
    head = gemm(b.n_seq, block.vocab_size * d, lay.tp, lay.peak_dense, lay.wb_dense,
                lay.hbm_bw, ops)
    proj = gemm(b.t_rank, 2.0 * d * d, lay.tp, lay.peak_dense, lay.wb_dense, lay.hbm_bw, ops)
    return head, proj


def draft_configs(cfg: Configs, q_tok=None) -> Configs:
    """The block's configurations: decode, one stage, `q_tok` tokens per sequence (the
    configuration's own 1 + mtp when None)."""
    mtp = cfg.mtp if q_tok is None else np.asarray(q_tok, dtype=np.float64) - 1.0
    return replace(cfg, phase=np.full_like(cfg.phase, int(Phase.DECODE)),
                   pp=np.ones_like(cfg.pp), mtp=mtp)


def _one_pass(block: ModelSpec, hardware: HardwareTable, cfg: Configs, eff: Efficiency,
              q_tok) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(time, FLOPs per GPU, HBM bytes per GPU) of one pass of `q_tok` tokens per
    sequence through the block; the head scores one token per sequence."""
    v = Shape(block, hardware, draft_configs(cfg, q_tok), eff)
    k = Kernels(block, v, eff)
    head, proj = head_and_projection(block, v, v)
    t_cm = k.t_attn + k.t_dense + k.t_always + k.t_experts + head.time_s + proj.time_s
    _, _, network_s = network(block, v, v)
    time_s = overlapped(t_cm, network_s, fixed_latency(block, v, eff), eff, np.minimum)
    flops = k.flops - k.head_flops + head.flops + proj.flops
    return time_s, flops, k.hbm_read + proj.hbm_bytes


def draft_passes(model: ModelSpec, hardware: HardwareTable, cfg: Configs, eff: Efficiency,
                 accepted) -> DraftCost:
    """The draft passes of each configuration's step: `cfg.mtp` of them in decode
    (none otherwise), the first over the `accepted` tokens per sequence (the mean the
    step yields), the rest over one."""
    drafts = np.where(cfg.phase == Phase.DECODE, cfg.mtp, 0.0)
    if not np.any(drafts > 0):
        zero = np.zeros(np.shape(drafts))
        return DraftCost(zero, zero, zero)
    block = mtp_module(model)
    first = _one_pass(block, hardware, cfg, eff, accepted)
    later = _one_pass(block, hardware, cfg, eff, 1.0)
    rest = np.maximum(drafts - 1.0, 0.0)
    on = drafts > 0

    def total(i: int) -> np.ndarray:
        return np.where(on, first[i] + rest * later[i], 0.0)

    # Each draft pass's host gap (the engine's, `Efficiency.draft_overhead_s`).
    time_s = np.where(on, (first[0] + rest * later[0]) + drafts * eff.draft_overhead_s, 0.0)
    return DraftCost(time_s, total(1), total(2))
