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


def weight_bytes_per_gpu(model: ModelSpec, layout=None, *, pp=None, tp=None, ep=None,
                         precision=None, attention_precision=None):
    """Weights one GPU of the heaviest stage holds (embedding or LM head included).
    `precision` is the routed experts'; `attention_precision` the rest's (None: the
    default rule of `precision.default_attention_precision`)."""
    if layout is not None:
        pp, tp, ep, precision = layout.pp, layout.tp, layout.ep, int(layout.weights)
        attention_precision = int(layout.attention_precision)
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
    return total
