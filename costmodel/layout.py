"""Parallel layouts: PP x TP x EP (x DP replicas) and the rules an impossible one breaks.

Inside one pipeline stage, `max(tp, ep)` GPUs work together: attention runs
tensor-parallel over `tp` GPUs and data-parallel over the rest; routed experts
spread over `ep` GPUs (and, where `tp > ep`, are tensor-split `tp / ep` ways).

Two kinds of rule: structural ones (`check_structure`: heads, experts, layer
groups, the scale-up domain) make a layout impossible to run at all; the memory
one (`check_memory`: the weights of a GPU's slice within its HBM) makes it not
fit on given hardware. `check_layout` applies both, for callers that must refuse
(binding a cluster); `tokenfactory cost` applies the first and reports the second.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from costmodel.errors import LayoutError
from costmodel.hardware import HardwareSpec
from costmodel.model import ModelSpec
from costmodel.precision import Precision, default_attention_precision


@dataclass(frozen=True)
class Layout:
    pp: int = 1
    tp: int = 1
    ep: int = 1
    dp: int = 1  # independent replicas of the whole PP x stage instance
    weights: Precision = Precision.FP8  # routed experts (unless the model fixes theirs)
    kv: Precision = Precision.BF16
    mtp: int = 0  # extra tokens drafted per decode step by multi-token prediction
    # Attention, dense FFN, shared experts, router, embeddings and LM head. None: the
    # routed experts' precision, but FP8 or wider (`default_attention_precision`).
    attention_weights: Precision | None = None
    # True: no `mtp` was chosen; binding to a model sets the model's shipped default
    # (`Layout.with_model_defaults`), until then `mtp` is a placeholder.
    mtp_from_model: bool = False

    @property
    def stage_gpus(self) -> int:
        return max(self.tp, self.ep)

    @property
    def instance_gpus(self) -> int:
        return self.pp * self.stage_gpus

    @property
    def gpus(self) -> int:
        return self.dp * self.instance_gpus

    @property
    def attention_precision(self) -> Precision:
        """The precision the non-expert weights are stored and computed in."""
        if self.attention_weights is not None:
            return Precision(self.attention_weights)
        return Precision(int(default_attention_precision(int(self.weights))))

    def with_model_defaults(self, model: ModelSpec) -> Layout:
        """This layout with what it left to the model filled in: MTP drafts per step."""
        if not self.mtp_from_model:
            return self
        from costmodel.mtp import default_mtp

        return replace(self, mtp=default_mtp(model), mtp_from_model=False)


def check_layout(model: ModelSpec, hw: HardwareSpec, layout: Layout) -> None:
    """Raise LayoutError naming the broken rule and by how much; return if it can run
    and its weights fit in HBM."""
    check_structure(model, hw, layout)
    check_memory(model, hw, layout)


def check_structure(model: ModelSpec, hw: HardwareSpec, layout: Layout) -> None:
    """Raise LayoutError naming the broken structural rule and by how much."""
    for name in ("pp", "tp", "ep", "dp"):
        value = getattr(layout, name)
        if not isinstance(value, int) or value < 1:
            raise LayoutError(f"{name}={value!r}: expected a positive integer")
    if layout.mtp < 0:
        raise LayoutError(f"mtp={layout.mtp}: expected >= 0")
    tp, ep, pp = layout.tp, layout.ep, layout.pp
    heads = model.tp_head_limit
    if heads % tp:
        raise LayoutError(
            f"tp={tp} does not divide the {heads} attention heads of {model.name} "
            f"(remainder {heads % tp})"
        )
    experts = model.moe.routed_experts if model.moe else 1
    if ep > experts:
        raise LayoutError(
            f"ep={ep} is larger than the {experts} routed experts of {model.name} "
            f"(by {ep - experts})"
        )
    if max(tp, ep) % min(tp, ep):
        raise LayoutError(f"tp={tp} and ep={ep}: the smaller must divide the larger")
    groups = model.n_layer_groups
    if pp > groups:
        raise LayoutError(
            f"pp={pp} is deeper than the {groups} layer groups of {model.name} "
            f"(by {pp - groups}); stages split only between groups"
        )
    if tp > hw.scale_up_domain_gpus:
        raise LayoutError(
            f"tp={tp} spans more than the scale-up domain of {hw.scale_up_domain_gpus} GPUs "
            f"of {hw.name} (by {tp - hw.scale_up_domain_gpus})"
        )


def check_memory(model: ModelSpec, hw: HardwareSpec, layout: Layout) -> None:
    """Raise LayoutError when one GPU's slice of the weights exceeds its HBM."""
    from costmodel.memory import weight_bytes_per_gpu

    weights = float(weight_bytes_per_gpu(model, layout))
    if weights > hw.hbm_bytes:
        raise LayoutError(
            f"the model slice does not fit: {weights / 1e9:.1f} GB of weights per GPU "
            f"> {hw.hbm_bytes / 1e9:.1f} GB HBM of {hw.name} (over by "
            f"{(weights - hw.hbm_bytes) / 1e9:.1f} GB); raise pp, tp or ep"
        )
