"""A prefill or decode step priced from measured tables, one term per kernel group.

Composition (our own; checked against the package's in tests):
- a step is the sum of its kernels, each queried at the per-GPU shape of the
  layout: tokens = batch x new tokens per attention rank; attention, norms and
  dense GEMMs see one rank's tokens; the experts see every attention rank's
  tokens (batch x dp), as EP gathers them;
- a GQA model: fused QKV, attention, output, gate/up, down GEMMs, two residual
  norms and the activation per layer, two TP all-reduces per layer plus one
  after the embedding, the LM head on one token per sequence;
- an MLA + MoE model: the MLA block from the module table (projections and
  attention measured together), per MoE layer the shared expert, the router, the
  grouped experts and the dispatch/combine collectives; per dense layer its FFN
  sharded over the attention TP group and one all-reduce; in decode the shared
  expert runs beside the routed path (the engine overlaps them on two streams),
  so the larger of the two counts;
- norms, activations and the embedding have no table: they are priced by the
  package's memory-bound rule (bytes / (bandwidth x its scaling) + a constant).

Each term is a function of one quantity (`Kind`): a rank's tokens, the expert
group's tokens, a rank's sequences, or, for the attention kernel, a rank's
(sequences, tokens per sequence). `gqa_step` and `mla_moe_step` price a step
whose ranks are alike; `costmodel.measured.prices` evaluates the same terms on
grids of those quantities, once per worker layout, and sums them per rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from costmodel.measured import ops
from costmodel.measured.ops import NotCovered, Priced
from costmodel.measured.tables import MeasuredTables


class Phase(Enum):
    PREFILL = "prefill"
    DECODE = "decode"


@dataclass(frozen=True)
class Layout:
    """Per-worker parallel layout. GPUs = tp x dp_attention = moe_tp x ep."""

    tp: int = 1
    ep: int = 1
    dp_attention: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "ep", "dp_attention"):
            if getattr(self, name) < 1:
                raise ValueError(f"Layout.{name} must be >= 1, got {getattr(self, name)}")
        if (self.tp * self.dp_attention) % self.ep:
            raise ValueError(f"ep={self.ep} does not divide tp x dp_attention = "
                             f"{self.tp * self.dp_attention}")

    @property
    def gpus(self) -> int:
        return self.tp * self.dp_attention

    @property
    def moe_tp(self) -> int:
        return self.gpus // self.ep


@dataclass(frozen=True)
class Dtypes:
    """Table dtype names: dense GEMMs, experts, KV cache, attention math."""

    gemm: str = "fp8"
    moe: str = "fp8"
    kv: str = "fp8"
    fmha: str = "bfloat16"


class Kind(Enum):
    """What a term's time is a function of. A data-parallel attention worker's ranks
    can hold different requests: each rank runs its own `TOKENS`, `SEQUENCES` and
    attention terms, the expert group its `GROUP` terms over every rank's tokens."""

    TOKENS = "tokens"  # query tokens on one attention rank
    GROUP = "group"  # tokens entering the expert-parallel group (every rank's)
    SEQUENCES = "sequences"  # sequences on one rank (the LM head's rows)
    ATTENTION = "attention"  # (sequences, tokens per sequence) on one rank


@dataclass(frozen=True)
class StepShape:
    """The quantities a step's terms are functions of (arrays broadcast together)."""

    tokens: np.ndarray
    group_tokens: np.ndarray
    sequences: np.ndarray

    @staticmethod
    def uniform(layout: Layout, phase: Phase, batch, tokens_per_seq) -> StepShape:
        """Every attention rank with `batch` sequences: prefill `tokens_per_seq` each,
        decode one token each."""
        batch, seq = np.broadcast_arrays(np.atleast_1d(np.asarray(batch, float)),
                                         np.asarray(tokens_per_seq, float))
        tokens = batch * seq if phase is Phase.PREFILL else batch
        return StepShape(tokens=tokens, group_tokens=tokens * layout.dp_attention,
                         sequences=batch)


@dataclass(frozen=True)
class StepTerms:
    """Seconds per step, per term, along the query's varying dimension."""

    terms: dict[str, np.ndarray]
    sources: dict[str, str]  # term -> the table (or rule) that priced it
    missing: dict[str, NotCovered] = field(default_factory=dict)
    kinds: dict[str, Kind] = field(default_factory=dict)  # term -> what it varies with
    # Terms that run beside others on a second stream: (side term, main terms); the
    # longer of the side and the mains' sum counts.
    overlap: tuple[str, tuple[str, ...]] | None = None

    @property
    def covered(self) -> bool:
        return not self.missing

    def total_s(self) -> np.ndarray | None:
        """Step time; None when any term is not covered."""
        if self.missing:
            return None
        if self.overlap is None:
            return sum(self.terms.values())
        side, mains = self.overlap
        rest = sum(v for k, v in self.terms.items() if k != side and k not in mains)
        return rest + np.maximum(sum(self.terms[k] for k in mains), self.terms[side])


class _Builder:
    """Collects terms, remembering what priced each, what it varies with and what was
    missing."""

    def __init__(self, tables: MeasuredTables, shape: StepShape):
        self.t = tables
        self.shape = shape
        self.terms: dict[str, np.ndarray] = {}
        self.sources: dict[str, str] = {}
        self.kinds: dict[str, Kind] = {}
        self.missing: dict[str, NotCovered] = {}
        self.overlap: tuple[str, tuple[str, ...]] | None = None
        v = tables.versions
        self._tag = {k: f"measured:{tables.system.name}/{tables.engine.value}/{v[k]}:{k}" for k in v}

    def add(self, term: str, value: Priced, count: float, table: str, kind: Kind) -> None:
        self.kinds[term] = kind
        if isinstance(value, NotCovered):
            self.missing[term] = value
            self.sources[term] = f"not covered: {value}"
            return
        like = self.shape.tokens if kind is not Kind.ATTENTION else value
        self.terms[term] = self.terms.get(term, 0.0) + count * np.broadcast_to(
            value, np.broadcast_shapes(np.shape(like), np.shape(value)))
        source = self._tag.get(table, table)
        self.sources[term] = source if self.sources.get(term, source) == source else "mixed"

    def allreduce(self, elements, gpus: int) -> tuple[Priced, str]:
        # The package's rule: a system file giving 72 GPUs per node all-reduces over 5+
        # GPUs with NCCL. Its GB200/GB300 files give 4 per node (a tray), so there the
        # custom all-reduce is read at 4 GPUs and scaled past it (ops.custom_allreduce).
        if self.t.system.gpus_per_node == 72 and gpus > 4:
            return ops.nccl(self.t, "all_reduce", elements, gpus), "nccl"
        return ops.custom_allreduce(self.t, elements, gpus), "custom_allreduce"

    def result(self) -> StepTerms:
        return StepTerms(self.terms, self.sources, self.missing, self.kinds, self.overlap)


def _attention_extras(b: _Builder, heads: int, kv_heads: int, head_dim: int, fmha: str):
    """RoPE and KV-cache write the prefill kernel table leaves out (package rule)."""
    q, k = heads * head_dim, kv_heads * head_dim
    fb = 1.0 if fmha.startswith("fp8") else 2.0
    mem = lambda n: ops.memory_op(b.t, n)  # noqa: E731
    return 1.1 * (2.0 * mem(2 * q + 2 * k) + mem(k * fb) + mem(k * fb))


def gqa_attention(tables: MeasuredTables, model, layout: Layout, dtypes: Dtypes, phase: Phase,
                  batch, tokens_per_seq) -> Priced:
    """One layer's attention kernel of `batch` sequences on one rank: prefill of prompts
    of `tokens_per_seq` (no prefix), or one decode step after `tokens_per_seq` of KV."""
    g, tp = model.gqa, layout.tp
    heads, kvh = g.heads // tp, -(-g.kv_heads // tp)
    if phase is Phase.PREFILL:
        return ops.context_attention(tables, batch, tokens_per_seq, heads, kvh, g.head_dim,
                                     dtypes.fmha, dtypes.kv)
    return ops.generation_attention(tables, batch, np.asarray(tokens_per_seq, float) + 1,
                                    heads, kvh, g.head_dim, dtypes.kv)


def gqa_terms(tables: MeasuredTables, model, layout: Layout, dtypes: Dtypes, phase: Phase,
              shape: StepShape) -> _Builder:
    """A dense GQA model's (Llama family) terms but its attention kernel."""
    g, h, L = model.gqa, model.hidden_size, model.n_full_layers
    b = _Builder(tables, shape)
    tp = layout.tp
    heads, kvh = g.heads // tp, -(-g.kv_heads // tp)
    inter = model.dense_intermediate // tp
    tokens = shape.tokens
    mem = lambda n: ops.memory_op(tables, n)  # noqa: E731
    T = Kind.TOKENS
    b.add("embedding", mem(tokens * h * 2), 1, "memory_op", T)
    b.add("norms", mem(tokens * 8 * h), 2 * L, "memory_op", T)
    b.add("qkv_gemm", ops.gemm(tables, tokens, heads * g.head_dim + 2 * kvh * g.head_dim, h,
                                dtypes.gemm), L, "gemm", T)
    if phase is Phase.PREFILL:
        b.add("attention_extras", _attention_extras(b, heads, kvh, g.head_dim, dtypes.fmha), L,
              "memory_op", T)
    b.add("proj_gemm", ops.gemm(tables, tokens, h, heads * g.head_dim, dtypes.gemm), L, "gemm", T)
    b.add("ffn_gemms", ops.gemm(tables, tokens, 2 * inter, h, dtypes.gemm), L, "gemm", T)
    b.add("ffn_gemms", ops.gemm(tables, tokens, h, inter, dtypes.gemm), L, "gemm", T)
    b.add("activation", mem(tokens * (2 * inter * 2 + inter * 2)), L, "memory_op", T)
    b.add("logits_gemm", ops.gemm(tables, shape.sequences, model.vocab_size // tp, h, "bfloat16"),
          1, "gemm", Kind.SEQUENCES)
    ar, table = b.allreduce(tokens * h, tp)
    b.add("tp_allreduce", ar, 2 * L + 1, table, T)
    return b


def gqa_step(tables: MeasuredTables, model, layout: Layout, dtypes: Dtypes, phase: Phase,
             batch, tokens_per_seq) -> StepTerms:
    """Dense GQA model (Llama family), every rank alike. ``tokens_per_seq``: prompt
    length (prefill) or KV length before the step (decode)."""
    b = gqa_terms(tables, model, layout, dtypes, phase,
                  StepShape.uniform(layout, phase, batch, tokens_per_seq))
    table = "context_attention" if phase is Phase.PREFILL else "generation_attention"
    b.add("attention", gqa_attention(tables, model, layout, dtypes, phase, batch, tokens_per_seq),
          model.n_full_layers, table, Kind.ATTENTION)
    return b.result()
