"""Resident memory per GPU: weights of the stage's slice. Works on scalars and arrays."""

from __future__ import annotations

import numpy as np

from costmodel.model import ModelSpec
from costmodel.precision import BYTES_PER_ELEMENT, Precision, default_attention_precision

_BYTES = np.array([BYTES_PER_ELEMENT[p] for p in Precision])


def dense_weight_bytes(attention_precision):
    """Bytes per element of the non-expert weights, stored at `attention_precision`
    (resolve a missing one with `precision.default_attention_precision`)."""
    return _BYTES[np.asarray(attention_precision)]


def expert_weight_bytes(model: ModelSpec, precision):
    if model.routed_expert_precision is not None:
        return np.full(np.shape(precision), BYTES_PER_ELEMENT[model.routed_expert_precision])
    return _BYTES[np.asarray(precision)]


def stage_fraction(model: ModelSpec, pp):
    """Share of the model's layers on the heaviest stage: stages split between layer
    groups, so a deep pipeline over few groups is uneven."""
    groups = model.n_layer_groups
    return np.ceil(groups / np.asarray(pp, dtype=np.float64)) / groups


def mtp_weight_bytes_per_gpu(model: ModelSpec, *, tp, ep, precision, attention_precision,
                             mtp):
    """The shipped MTP modules' weights one GPU holds where the layout drafts (`mtp` > 0):
    each module's 2d x d projection, its transformer block (attention, and the MoE FFN
    split as the main model's, or a dense one) at the layout's precisions; the embedding
    and LM head are the main model's, shared (SGLang and TensorRT-LLM load them once).
    DeepSeek-V3: 0.10B + 0.19B + 0.05B + 256 x 44M routed = 11.6B parameters (its report
    counts 14B for the module with its own copies of the embedding and head, arXiv
    2412.19437). None for a model without a head."""
    if not model.mtp_layers:
        return np.zeros(np.shape(np.asarray(mtp, dtype=np.float64)))
    tp, ep = np.asarray(tp, dtype=np.float64), np.asarray(ep, dtype=np.float64)
    d = float(model.hidden_size)
    wb = dense_weight_bytes(attention_precision)
    ffn = model.moe_always_params if model.moe is not None else model.dense_ffn_params
    per_module = (2.0 * d * d + model.attn_params + ffn) / tp * wb
    if model.moe is not None:
        routed = np.ceil(model.moe.routed_experts / ep) * model.expert_params / np.maximum(
            1.0, tp / ep)
        per_module = per_module + routed * expert_weight_bytes(model, precision)
    return np.where(np.asarray(mtp) > 0, model.mtp_layers * per_module, 0.0)


def weight_bytes_per_gpu(model: ModelSpec, layout=None, *, pp=None, tp=None, ep=None,
                         precision=None, attention_precision=None, mtp=0):
    """Weights one GPU of the heaviest stage holds (embedding or LM head included, and
    the MTP modules where the layout drafts: `mtp_weight_bytes_per_gpu`). `precision` is
    the routed experts'; `attention_precision` the rest's (None: the default rule of
    `precision.default_attention_precision`)."""
    if layout is not None:
        pp, tp, ep, precision = layout.pp, layout.tp, layout.ep, int(layout.weights)
        attention_precision = int(layout.attention_precision)
        mtp = layout.mtp
    if attention_precision is None:
        attention_precision = default_attention_precision(precision)
    pp, tp, ep = (np.asarray(x, dtype=np.float64) for x in (pp, tp, ep))
    f = stage_fraction(model, pp)
    wb = dense_weight_bytes(attention_precision)
    attn = ((model.n_full_layers + model.n_sliding_layers) * model.attn_params
            + model.n_linear_layers * model.linear_params)
    dense = model.n_dense_layers * model.dense_ffn_params
    # The first stage holds the embedding, the last the LM head; one stage holds both.
    tables = np.where(pp > 1, 1.0, 1.0 if model.tie_word_embeddings else 2.0)
    per_tp = f * (attn + dense) + tables * model.vocab_size * model.hidden_size
    total = per_tp / tp * wb
    if model.moe is not None:
        always = model.n_moe_layers * model.moe_always_params
        experts_per_rank = np.ceil(model.moe.routed_experts / ep)
        expert_split = np.maximum(1.0, tp / ep)
        routed = model.n_moe_layers * experts_per_rank * model.expert_params / expert_split
        total = total + f * (always / tp * wb + routed * expert_weight_bytes(model, precision))
    return total + mtp_weight_bytes_per_gpu(model, tp=tp, ep=ep, precision=precision,
                                            attention_precision=attention_precision, mtp=mtp)
