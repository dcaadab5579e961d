"""Build a ModelSpec from a HuggingFace `config.json` dictionary.

Field names follow the families' own configs; where families spell a field
differently (`n_routed_experts` / `num_experts` / `num_local_experts`) each
spelling is accepted. A missing or mistyped field is named in the error.
"""

from __future__ import annotations

from typing import Any

from costmodel.errors import CostModelError
from costmodel.model_spec import (
    GQA,
    MLA,
    AttentionKind,
    LinearAttention,
    LinearKind,
    ModelSpec,
    MoE,
)
from costmodel.precision import Precision

_MISSING = object()


class _Fields:
    def __init__(self, config: dict[str, Any], where: str):
        self.config, self.where = config, where

    def int(self, *keys: str, default: Any = _MISSING, minimum: int = 1) -> int:
        for key in keys:
            if key in self.config and self.config[key] is not None:
                value = self.config[key]
                if isinstance(value, bool) or not isinstance(value, int):
                    raise CostModelError(
                        f"{self.where}: field {key}: expected an integer, got {value!r}"
                    )
                if value < minimum:
                    raise CostModelError(
                        f"{self.where}: field {key}: expected >= {minimum}, got {value}"
                    )
                return value
        if default is _MISSING:
            raise CostModelError(f"{self.where}: field {keys[0]} is missing")
        return default

    def get(self, key: str, default: Any = None) -> Any:
        return self.config.get(key, default)


def _mla(f: _Fields):

    return MLA(
        heads=f.int("num_attention_heads"),
        q_lora_rank=f.int("q_lora_rank", default=0, minimum=0),
        kv_lora_rank=f.int("kv_lora_rank"),
        rope_dim=f.int("qk_rope_head_dim"),
        nope_dim=f.int("qk_nope_head_dim"),
        v_dim=f.int("v_head_dim"),
    )


def _gqa(f: _Fields, model_type: str):

    heads = f.int("num_attention_heads")
    head_dim = f.int("head_dim", default=0, minimum=0) or f.int("hidden_size") // heads
    return GQA(
        heads=heads,
        kv_heads=f.int("num_key_value_heads", default=heads),
        head_dim=head_dim,
        output_gate=model_type == "qwen3_next",
        qk_norm=model_type in ("qwen3_moe", "qwen3_next", "qwen3"),
    )


def _moe(f: _Fields):

    routed = f.int("n_routed_experts", "num_experts", "num_local_experts", default=0, minimum=0)
    if routed == 0:
        return None
    top_k = f.int("num_experts_per_tok", "num_experts_per_token")
    if top_k > routed:
        raise CostModelError(
            f"{f.where}: field num_experts_per_tok: {top_k} is more than the {routed} experts"
        )
    inter = f.int("moe_intermediate_size", default=0, minimum=0) or f.int("intermediate_size")
    shared = f.int("n_shared_experts", "num_shared_experts", default=0, minimum=0)
    shared_inter = f.int("shared_expert_intermediate_size", default=inter)
    if f.get("model_type") == "qwen3_next" and shared == 0:
        shared = 1  # Qwen3-Next has one shared expert, sized by shared_expert_intermediate_size
    return MoE(
        routed_experts=routed,
        top_k=top_k,
        shared_experts=shared,
        expert_intermediate=inter,
        shared_intermediate=shared_inter,
        latent_size=f.int("moe_latent_size", default=0, minimum=0),
    )


def _layer_pattern(f: _Fields, model_type: str, n_layers: int):
    """(full, sliding, linear layer counts, LinearAttention or None, sliding window)."""

    lin_cfg = f.get("linear_attn_config")
    if lin_cfg is not None:
        if not isinstance(lin_cfg, dict):
            raise CostModelError(f"{f.where}: field linear_attn_config: expected an object")
        full = lin_cfg.get("full_attn_layers")
        if not isinstance(full, list) or not all(
            isinstance(i, int) and 1 <= i <= n_layers for i in full
        ):
            raise CostModelError(
                f"{f.where}: field linear_attn_config.full_attn_layers: expected a list of "
                f"layer numbers 1..{n_layers}"
            )
        lf = _Fields(lin_cfg, f.where + " linear_attn_config")
        heads = lf.int("num_heads")
        dim = lf.int("head_dim")
        la = LinearAttention(LinearKind.KDA, heads, heads, dim, dim,
                             lf.int("short_conv_kernel_size", default=4))
        n_full = len(set(full))
        return n_full, 0, n_layers - n_full, la, 0
    if model_type == "qwen3_next":
        interval = f.int("full_attention_interval")
        n_full = n_layers // interval
        la = LinearAttention(
            LinearKind.GATED_DELTANET,
            key_heads=f.int("linear_num_key_heads"),
            value_heads=f.int("linear_num_value_heads"),
            key_dim=f.int("linear_key_head_dim"),
            value_dim=f.int("linear_value_head_dim"),
            conv_kernel=f.int("linear_conv_kernel_dim", default=4),
        )
        return n_full, 0, n_layers - n_full, la, 0
    layer_types = f.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != n_layers:
            raise CostModelError(
                f"{f.where}: field layer_types: expected a list of {n_layers} entries"
            )
        unknown = set(layer_types) - {"sliding_attention", "full_attention"}
        if unknown:
            raise CostModelError(
                f"{f.where}: field layer_types: unknown layer type {sorted(unknown)[0]!r}"
            )
        n_sliding = layer_types.count("sliding_attention")
        window = f.int("sliding_window") if n_sliding else 0
        return n_layers - n_sliding, n_sliding, 0, None, window
    return n_layers, 0, 0, None, 0


def model_from_hf_config(config: dict[str, Any], name: str, where: str = "config.json"):
    """A ModelSpec from a HuggingFace config dictionary; errors name the field."""

    f = _Fields(config, where)
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        raise CostModelError(f"{where}: field model_type is missing or not a string")
    d = f.int("hidden_size")
    n_layers = f.int("num_hidden_layers")
    is_mla = "kv_lora_rank" in config and config["kv_lora_rank"] is not None
    n_full, n_sliding, n_linear, linear, window = _layer_pattern(f, model_type, n_layers)
    moe = _moe(f)
    if moe is None:
        n_dense = n_layers
    elif "first_k_dense_replace" in config:
        n_dense = f.int("first_k_dense_replace", minimum=0)
    else:
        mlp_only = config.get("mlp_only_layers") or []
        n_dense = len(mlp_only) if isinstance(mlp_only, list) else 0
    dense_inter = f.int("intermediate_size") if n_dense else 0
    expert_dtype = config.get("routed_expert_dtype")
    if expert_dtype is not None:
        if not isinstance(expert_dtype, str):
            raise CostModelError(f"{where}: field routed_expert_dtype: expected a string")
        try:
            expert_precision = Precision.parse(expert_dtype)
        except CostModelError as exc:
            raise CostModelError(f"{where}: field routed_expert_dtype: {exc}") from None
    else:
        expert_precision = None
    if n_dense > n_layers:
        raise CostModelError(
            f"{where}: field first_k_dense_replace: {n_dense} is more than {n_layers} layers"
        )
    return ModelSpec(
        name=name,
        hidden_size=d,
        vocab_size=f.int("vocab_size"),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        max_context_tokens=f.int("max_position_embeddings", default=131072),
        attention=AttentionKind.MLA if is_mla else AttentionKind.GQA,
        mla=_mla(f) if is_mla else None,
        gqa=None if is_mla else _gqa(f, model_type),
        linear=linear,
        moe=moe,
        n_full_layers=n_full,
        n_sliding_layers=n_sliding,
        n_linear_layers=n_linear,
        sliding_window=window,
        n_dense_layers=n_dense,
        dense_intermediate=dense_inter,
        mtp_layers=f.int("num_nextn_predict_layers", default=0, minimum=0),
        routed_expert_precision=expert_precision,
        mtp_acceptance=_acceptance(config, where),
    )


def _acceptance(config: dict[str, Any], where: str) -> tuple[float, ...] | None:
    """The optional `mtp_acceptance` field (not HuggingFace's: the cost core's)."""
    if "mtp_acceptance" not in config:
        return None
    from costmodel.mtp import check_acceptance

    return check_acceptance(config["mtp_acceptance"], f"{where}: field mtp_acceptance")
