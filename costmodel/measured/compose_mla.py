"""An MLA + MoE step (DeepSeek-V3 family) priced from measured tables.

See ``compose`` for the rules. Specific to this family: the MLA block comes
from the module table (TensorRT-LLM and vLLM ship one; an engine without it
is "not covered"), and the MoE dispatch/combine follows TensorRT-LLM's
non-wide-EP path: with attention TP a custom all-reduce over all GPUs on each
side; with DP attention an all-gather of every rank's tokens before the experts
and a reduce-scatter after (on SM100 the gathered activations are fp8, half the
16-bit volume).
"""

from __future__ import annotations

import numpy as np

from costmodel.measured import ops
from costmodel.measured.catalog import Engine
from costmodel.measured.compose import Dtypes, Layout, Phase, StepTerms, _Builder
from costmodel.measured.tables import MeasuredTables


def _dispatch(b: _Builder, layout: Layout, tokens, hidden: int, moe_dtype: str, pre: bool):
    """One side of the MoE exchange; returns (priced, table name)."""
    attn_tp, dp, gpus = layout.tp, layout.dp_attention, layout.gpus
    sm100 = b.t.system.sm_version == 100
    if b.t.engine is not Engine.TRTLLM:
        return ops.NotCovered("moe_dispatch", f"a composition for {b.t.engine.value} (TRT-LLM only)"), "-"
    if sm100 and b.t.system.gpus_per_node >= 72 and dp > 1 and layout.moe_tp == 1:
        return ops.NotCovered("trtllm_alltoall", "the NVL72 all-to-all table (not read)"), "-"
    if (sm100 and dp > 1) or (not sm100 and attn_tp == 1 and dp > 1):
        scale = 0.5 if sm100 and pre and moe_dtype.startswith("fp8") else 1.0
        op = "all_gather" if pre else "reduce_scatter"
        return ops.nccl(b.t, op, tokens * dp * hidden * scale, gpus), "nccl"
    if attn_tp > 1:
        return b.allreduce(tokens * hidden, gpus)
    return np.zeros(b.shape), "-"


def mla_moe_step(tables: MeasuredTables, model, layout: Layout, dtypes: Dtypes, phase: Phase,
                 batch, tokens_per_seq, dense_layers_as_moe: bool = False) -> StepTerms:
    """MLA attention, shared + routed experts. ``batch`` is per attention rank;
    ``tokens_per_seq`` the prompt (prefill) or the KV length before the step (decode).

    ``dense_layers_as_moe`` prices the model's leading dense layers as MoE layers,
    as the package does, instead of as the dense FFNs they are.
    """
    mla, moe, h = model.mla, model.moe, model.hidden_size
    layers = model.n_full_layers + model.n_sliding_layers
    dense = 0 if dense_layers_as_moe else model.n_dense_layers
    moe_layers = layers - dense
    batch, seq = np.broadcast_arrays(np.atleast_1d(np.asarray(batch, float)),
                                     np.asarray(tokens_per_seq, float))
    b = _Builder(tables, batch.shape)
    tp, ep, moe_tp = layout.tp, layout.ep, layout.moe_tp
    tokens = batch * seq if phase is Phase.PREFILL else batch
    mem = lambda n: ops.memory_op(tables, n)  # noqa: E731

    b.add("embedding", mem(tokens * h * 2), 1, "memory_op")
    b.add("norms", mem(tokens * 8 * h), 2 * layers, "memory_op")
    if phase is Phase.PREFILL:
        attn = ops.context_mla_module(tables, batch, seq, mla.heads // tp, dtypes.fmha, dtypes.kv,
                                      dtypes.gemm)
        b.add("attention", attn, layers, "context_mla_module")
    else:
        attn = ops.generation_mla_module(tables, batch, seq + 1, mla.heads // tp, dtypes.kv,
                                         dtypes.gemm)
        b.add("attention", attn, layers, "generation_mla_module")

    def ffn(inter: int):
        """Gate/up GEMM, activation, down GEMM of one sharded FFN, per layer."""
        up = ops.gemm(tables, tokens, 2 * inter, h, dtypes.gemm)
        down = ops.gemm(tables, tokens, h, inter, dtypes.gemm)
        if isinstance(up, ops.NotCovered) or isinstance(down, ops.NotCovered):
            return up if isinstance(up, ops.NotCovered) else down
        return up + down + mem(tokens * (2 * inter * 2 + inter * 2))

    shared = ffn(moe.shared_experts * moe.shared_intermediate // tp)
    router = ops.gemm(tables, tokens, moe.routed_experts, h, "bfloat16")
    experts = ops.moe(tables, tokens * layout.dp_attention, h, moe.expert_intermediate, moe.top_k,
                      moe.routed_experts, moe_tp, ep, dtypes.moe)
    pre, pre_table = _dispatch(b, layout, tokens, h, dtypes.moe, pre=True)
    post, post_table = _dispatch(b, layout, tokens, h, dtypes.moe, pre=False)
    if phase is Phase.PREFILL:
        b.add("shared_expert", shared, moe_layers, "gemm")
        b.add("router_gemm", router, moe_layers, "gemm")
        b.add("moe", experts, moe_layers, "moe")
        b.add("moe_dispatch", pre, moe_layers, pre_table)
        b.add("moe_dispatch", post, moe_layers, post_table)
    else:
        parts = (shared, router, experts, pre, post)
        miss = next((p for p in parts if isinstance(p, ops.NotCovered)), None)
        if miss is not None:
            b.add("moe", miss, moe_layers, "moe")
        else:
            # Shared expert on a side stream: the longer of the two paths counts.
            b.add("moe", np.maximum(router + pre + experts + post, shared), moe_layers, "moe")
    if dense:
        b.add("dense_ffn", ffn(model.dense_intermediate // tp), dense, "gemm")
        ar, table = b.allreduce(tokens * h, tp)
        b.add("dense_allreduce", ar, dense, table)
    b.add("logits_gemm", ops.gemm(tables, batch, model.vocab_size // tp, h, "bfloat16"), 1, "gemm")
    return b.result()
