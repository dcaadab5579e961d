"""Model specs: the shapes that set FLOPs, weight bytes, KV bytes and routing.

Parameter counts and KV bytes per token are pure arithmetic on the fields, so they
can be checked against published figures exactly. Built from a HuggingFace
`config.json` by `costmodel/hf_config.py`; presets and files are read by
`costmodel/model.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property

from costmodel.precision import Precision


class AttentionKind(IntEnum):
    MLA = 0  # multi-head latent attention: one compressed latent per token per layer
    GQA = 1  # grouped-query attention


class LinearKind(IntEnum):
    NONE = 0
    KDA = 1  # Kimi Delta Attention
    GATED_DELTANET = 2  # Qwen3-Next


@dataclass(frozen=True)
class MLA:
    heads: int
    q_lora_rank: int  # 0: no low-rank query projection
    kv_lora_rank: int
    rope_dim: int
    nope_dim: int
    v_dim: int


@dataclass(frozen=True)
class GQA:
    heads: int
    kv_heads: int
    head_dim: int
    output_gate: bool = False  # Qwen3-Next gated attention doubles the query projection
    qk_norm: bool = False


@dataclass(frozen=True)
class LinearAttention:
    kind: LinearKind
    key_heads: int
    value_heads: int
    key_dim: int
    value_dim: int
    conv_kernel: int


@dataclass(frozen=True)
class MoE:
    routed_experts: int
    top_k: int
    shared_experts: int
    expert_intermediate: int
    shared_intermediate: int
    latent_size: int  # 0: experts work on the full hidden size


@dataclass(frozen=True)
class ModelSpec:
    name: str
    hidden_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_context_tokens: int
    attention: AttentionKind
    mla: MLA | None
    gqa: GQA | None
    linear: LinearAttention | None
    moe: MoE | None
    n_full_layers: int  # full attention over the whole context
    n_sliding_layers: int  # attention over a window of `sliding_window` tokens
    n_linear_layers: int  # linear attention: a fixed-size state per sequence
    sliding_window: int
    n_dense_layers: int  # layers with a dense FFN (the rest are MoE)
    dense_intermediate: int
    mtp_layers: int  # multi-token-prediction modules shipped with the model (not counted)
    routed_expert_precision: Precision | None  # a fixed storage format for routed experts
    # Conditional acceptance of each MTP draft position, from the model's public reports
    # (the model file's `mtp_acceptance`); None: the generic default (costmodel/mtp.py).
    mtp_acceptance: tuple[float, ...] | None = None

    @property
    def num_layers(self) -> int:
        return self.n_full_layers + self.n_sliding_layers + self.n_linear_layers

    @property
    def n_moe_layers(self) -> int:
        return self.num_layers - self.n_dense_layers

    @property
    def n_layer_groups(self) -> int:
        """Pipeline stages may only split between groups: one full-attention layer and
        the linear or local layers around it (the source essay, docs/sources.md)."""
        return max(1, self.n_full_layers)

    # --- per-layer parameter counts -------------------------------------------------

    @cached_property
    def attn_params(self) -> int:
        """Parameters of one full (or sliding) attention layer."""
        d = self.hidden_size
        if self.attention is AttentionKind.MLA:
            m = self.mla
            qk = m.nope_dim + m.rope_dim
            q = (d * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * m.heads * qk
                 if m.q_lora_rank else d * m.heads * qk)
            kv = d * (m.kv_lora_rank + m.rope_dim) + m.kv_lora_rank
            kv += m.kv_lora_rank * m.heads * (m.nope_dim + m.v_dim)
            return q + kv + m.heads * m.v_dim * d
        g = self.gqa
        q = d * g.heads * g.head_dim * (2 if g.output_gate else 1)
        kv = 2 * d * g.kv_heads * g.head_dim
        return q + kv + g.heads * g.head_dim * d + (2 * g.head_dim if g.qk_norm else 0)

    @cached_property
    def linear_params(self) -> int:
        """Parameters of one linear-attention layer (projections, gates, short conv)."""
        if self.linear is None:
            return 0
        d, la = self.hidden_size, self.linear
        qk = la.key_heads * la.key_dim
        v = la.value_heads * la.value_dim
        conv = (2 * qk + v) * la.conv_kernel
        if la.kind is LinearKind.KDA:
            # q, k, v, output; low-rank (head_dim) forget and output gates; beta per head.
            gates = 2 * (d * la.key_dim + la.key_dim * v)
            return d * (2 * qk + v) + v * d + gates + d * la.value_heads + conv
        # Gated DeltaNet: in_proj_qkvz, in_proj_ba (beta, alpha per value head), out.
        return d * (2 * qk + 2 * v) + d * 2 * la.value_heads + conv + v * d

    @cached_property
    def dense_ffn_params(self) -> int:
        return 3 * self.hidden_size * self.dense_intermediate  # gate, up, down

    @cached_property
    def expert_params(self) -> int:
        """One routed expert (gate, up, down) on its working width."""
        m = self.moe
        return 3 * (m.latent_size or self.hidden_size) * m.expert_intermediate

    @cached_property
    def moe_always_params(self) -> int:
        """Per MoE layer, the parameters every token uses: router, shared experts,
        and the projections to and from the expert latent width."""
        m, d = self.moe, self.hidden_size
        shared = m.shared_experts * 3 * d * m.shared_intermediate
        return d * m.routed_experts + shared + (2 * d * m.latent_size if m.latent_size else 0)

    # --- totals -----------------------------------------------------------------------

    def _params(self, experts_per_layer: int) -> int:
        d = self.hidden_size
        embed = self.vocab_size * d * (1 if self.tie_word_embeddings else 2)
        norms = 2 * d * self.num_layers + d
        attn = (self.n_full_layers + self.n_sliding_layers) * self.attn_params
        attn += self.n_linear_layers * self.linear_params
        ffn = self.n_dense_layers * self.dense_ffn_params
        if self.moe is not None:
            ffn += self.n_moe_layers * (self.moe_always_params
                                        + experts_per_layer * self.expert_params)
        return embed + norms + attn + ffn

    @cached_property
    def total_params(self) -> int:
        """All parameters, multi-token-prediction modules excluded."""
        return self._params(self.moe.routed_experts if self.moe else 0)

    @cached_property
    def active_params(self) -> int:
        """Parameters one token computes with: routed experts counted top-k times, the
        input embedding left out (a row read, no arithmetic; tied, it is the LM head and
        counts).

        The convention of the one vendor that breaks its figure down: gpt-oss-120b's
        5.13B active are 4 of 128 experts, attention and the unembedding, not the
        embedding (OpenAI, gpt-oss-120b & gpt-oss-20b Model Card, arXiv:2508.10925).
        DeepSeek-V3's 37B, Kimi K2's 32B and Qwen3-235B's 22B come out so at the precision
        they are published to (tests/unit/test_costmodel_presets.py)."""
        embed = 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size
        return self._params(self.moe.top_k if self.moe else 0) - embed

    # --- KV and state -----------------------------------------------------------------

    @cached_property
    def kv_elems_per_token_layer(self) -> int:
        if self.attention is AttentionKind.MLA:
            return self.mla.kv_lora_rank + self.mla.rope_dim
        return 2 * self.gqa.kv_heads * self.gqa.head_dim

    def kv_bytes_per_token(self, kv_bytes_per_elem: float = 2.0) -> float:
        """KV of one token over the full-attention layers (sliding layers hold a window)."""
        return self.n_full_layers * self.kv_elems_per_token_layer * kv_bytes_per_elem

    def state_bytes_per_sequence(self, kv_bytes_per_elem: float = 2.0) -> float:
        """What a sequence holds whatever its length: linear-attention states (fp32,
        key_dim x value_dim per value head), short-conv tails, sliding windows."""
        total = 0.0
        if self.linear is not None:
            la = self.linear
            state = la.value_heads * la.key_dim * la.value_dim * 4.0
            conv = (la.conv_kernel - 1) * (2 * la.key_heads * la.key_dim
                                           + la.value_heads * la.value_dim) * 2.0
            total += self.n_linear_layers * (state + conv)
        total += (self.n_sliding_layers * self.sliding_window
                  * self.kv_elems_per_token_layer * kv_bytes_per_elem)
        return total

    # --- attention arithmetic (per query token, per context token, per layer) ----------

    @cached_property
    def attn_flops_per_ctx_token_prefill(self) -> float:
        """Scores and values with full heads (MLA decompressed, as prefill kernels run)."""
        if self.attention is AttentionKind.MLA:
            m = self.mla
            return 2.0 * m.heads * (m.nope_dim + m.rope_dim + m.v_dim)
        return 4.0 * self.gqa.heads * self.gqa.head_dim

    @cached_property
    def attn_flops_per_ctx_token_decode(self) -> float:
        """Decode MLA works on the latent (weights absorbed): 576-wide scores, 512-wide values."""
        if self.attention is AttentionKind.MLA:
            m = self.mla
            return 2.0 * m.heads * (2 * m.kv_lora_rank + m.rope_dim)
        return 4.0 * self.gqa.heads * self.gqa.head_dim

    @cached_property
    def linear_flops_per_token(self) -> float:
        """Delta-rule state update and readout: a few key_dim x value_dim products per head."""
        if self.linear is None:
            return 0.0
        la = self.linear
        return 6.0 * la.value_heads * la.key_dim * la.value_dim

    @property
    def tp_head_limit(self) -> int:
        """Attention heads: tensor parallelism must divide them."""
        if self.attention is AttentionKind.MLA:
            return self.mla.heads
        return self.gqa.heads

    def kv_tp_split(self, tp: int) -> int:
        """How many ways a layer's KV splits under TP: MLA's latent is shared by all heads,
        so every TP rank holds all of it; GQA splits by KV head, replicating beyond."""
        if self.attention is AttentionKind.MLA:
            return 1
        return min(tp, self.gqa.kv_heads)
