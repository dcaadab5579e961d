"""An MLA + MoE step (DeepSeek-V3 family) priced from measured tables.

See ``compose`` for the rules. Specific to this family: the MLA block comes
from the module table (TensorRT-LLM and vLLM ship one; an engine without it
is "not covered"), and the MoE dispatch/combine follows TensorRT-LLM's
non-wide-EP path: with attention TP a custom all-reduce over all GPUs on each
side; with DP attention an all-gather of every rank's tokens before the experts
and a reduce-scatter after (on SM100 the gathered activations are fp8, half the
16-bit volume). That gather is priced only within one NVLink domain (a node, or
a GB200/GB300 rack): past it engines switch to a wide-EP all-to-all, whose
tables are not read, so the exchange is "not covered" there.
"""

from __future__ import annotations

import numpy as np

from costmodel.measured import ops
from costmodel.measured.catalog import Engine
from costmodel.measured.compose import (
    Dtypes,
    Kind,
    Layout,
    Phase,
    StepShape,
    StepTerms,
    _Builder,
)
from costmodel.measured.ops import Priced
from costmodel.measured.tables import MeasuredTables


def _dispatch(b: _Builder, layout: Layout, shape: StepShape, hidden: int, moe_dtype: str,
              pre: bool):
    """One side of the MoE exchange; returns (priced, table name, what it varies with)."""
    attn_tp, dp, gpus = layout.tp, layout.dp_attention, layout.gpus
    sm100 = b.t.system.sm_version == 100
    if b.t.engine is not Engine.TRTLLM:
        return (ops.NotCovered("composition", f"MoE exchange for {b.t.engine.value} "
                               "(TensorRT-LLM's only)"), "-", Kind.GROUP)
    if sm100 and b.t.system.gpus_per_node >= 72 and dp > 1 and layout.moe_tp == 1:
        return ops.NotCovered("trtllm_alltoall", "the NVL72 all-to-all table (not read)"), "-", Kind.GROUP
    if (sm100 and dp > 1) or (not sm100 and attn_tp == 1 and dp > 1):
        if gpus > b.t.system.nvlink_domain:
            # Beyond one NVLink domain engines run a wide-EP all-to-all (DeepEP, TensorRT-LLM
            # wide-EP), not this all-gather (which the package would scale to the NIC).
            return (ops.NotCovered("composition", f"MoE exchange over {gpus} GPUs across "
                                   "nodes (a wide-EP all-to-all; those tables are not read)"),
                    "-", Kind.GROUP)
        scale = 0.5 if sm100 and pre and moe_dtype.startswith("fp8") else 1.0
        op = "all_gather" if pre else "reduce_scatter"
        return ops.nccl(b.t, op, shape.group_tokens * hidden * scale, gpus), "nccl", Kind.GROUP
    if attn_tp > 1:
        return (*b.allreduce(shape.tokens * hidden, gpus), Kind.TOKENS)
    return np.zeros(np.shape(shape.tokens)), "-", Kind.TOKENS


def mla_attention(tables: MeasuredTables, model, layout: Layout, dtypes: Dtypes, phase: Phase,
                  batch, tokens_per_seq) -> Priced:
    """One layer's whole MLA block (projections and attention, the module table) for
    `batch` sequences on one rank: prefill of prompts of `tokens_per_seq` (no prefix),
    or one decode step after `tokens_per_seq` of KV."""
    heads = model.mla.heads // layout.tp
    if phase is Phase.PREFILL:
        return ops.context_mla_module(tables, batch, tokens_per_seq, heads, dtypes.fmha,
                                      dtypes.kv, dtypes.gemm)
    return ops.generation_mla_module(tables, batch, np.asarray(tokens_per_seq, float) + 1,
                                     heads, dtypes.kv, dtypes.gemm)


def mla_moe_terms(tables: MeasuredTables, model, layout: Layout, dtypes: Dtypes, phase: Phase,
                  shape: StepShape, dense_layers_as_moe: bool = False) -> _Builder:
    """MLA + MoE terms but the attention block. ``dense_layers_as_moe`` prices the
    model's leading dense layers as MoE layers, as the package does, instead of as the
    dense FFNs they are."""
    moe, h = model.moe, model.hidden_size
    layers = model.n_full_layers + model.n_sliding_layers
    dense = 0 if dense_layers_as_moe else model.n_dense_layers
    moe_layers = layers - dense
    b = _Builder(tables, shape)
    tp, ep, moe_tp = layout.tp, layout.ep, layout.moe_tp
    tokens = shape.tokens
    mem = lambda n: ops.memory_op(tables, n)  # noqa: E731
    T, G = Kind.TOKENS, Kind.GROUP

    b.add("embedding", mem(tokens * h * 2), 1, "memory_op", T)
    b.add("norms", mem(tokens * 8 * h), 2 * layers, "memory_op", T)

    def ffn(inter: int):
        """Gate/up GEMM, activation, down GEMM of one sharded FFN, per layer."""
        up = ops.gemm(tables, tokens, 2 * inter, h, dtypes.gemm)
        down = ops.gemm(tables, tokens, h, inter, dtypes.gemm)
        if isinstance(up, ops.NotCovered) or isinstance(down, ops.NotCovered):
            return up if isinstance(up, ops.NotCovered) else down
        return up + down + mem(tokens * (2 * inter * 2 + inter * 2))

    b.add("shared_expert", ffn(moe.shared_experts * moe.shared_intermediate // tp), moe_layers,
          "gemm", T)
    b.add("router_gemm", ops.gemm(tables, tokens, moe.routed_experts, h, "bfloat16"), moe_layers,
          "gemm", T)
    b.add("moe", ops.moe(tables, shape.group_tokens, h, moe.expert_intermediate, moe.top_k,
                         moe.routed_experts, moe_tp, ep, dtypes.moe), moe_layers, "moe", G)
    pre, pre_table, pre_kind = _dispatch(b, layout, shape, h, dtypes.moe, pre=True)
    post, post_table, post_kind = _dispatch(b, layout, shape, h, dtypes.moe, pre=False)
    b.add("moe_dispatch", pre, moe_layers, pre_table, pre_kind)
    b.add("moe_combine", post, moe_layers, post_table, post_kind)
    if phase is Phase.DECODE:
        # Shared expert on a side stream: the longer of the two paths counts.
        b.overlap = ("shared_expert", ("router_gemm", "moe_dispatch", "moe", "moe_combine"))
    if dense:
        b.add("dense_ffn", ffn(model.dense_intermediate // tp), dense, "gemm", T)
        ar, table = b.allreduce(tokens * h, tp)
        b.add("dense_allreduce", ar, dense, table, T)
    b.add("logits_gemm", ops.gemm(tables, shape.sequences, model.vocab_size // tp, h, "bfloat16"),
          1, "gemm", Kind.SEQUENCES)
    return b


def mla_moe_step(tables: MeasuredTables, model, layout: Layout, dtypes: Dtypes, phase: Phase,
                 batch, tokens_per_seq, dense_layers_as_moe: bool = False) -> StepTerms:
    """MLA attention, shared + routed experts, every rank alike. ``batch`` is per
    attention rank; ``tokens_per_seq`` the prompt (prefill) or the KV length before the
    step (decode)."""
    b = mla_moe_terms(tables, model, layout, dtypes, phase,
                      StepShape.uniform(layout, phase, batch, tokens_per_seq), dense_layers_as_moe)
    table = "context_mla_module" if phase is Phase.PREFILL else "generation_mla_module"
    b.add("attention", mla_attention(tables, model, layout, dtypes, phase, batch, tokens_per_seq),
          model.n_full_layers + model.n_sliding_layers, table, Kind.ATTENTION)
    return b.result()
