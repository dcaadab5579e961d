"""Which cost source prices a worker layout, and its measured curves when the tables do.

A cluster (`cost_source` in its file) or a command (`--cost-source`) picks one of
`CostSourceKind`: `roofline` (the default: results do not depend on whether the
extra is installed), `measured` (the tables where they cover the layout, the
roofline elsewhere; the extra required) or `auto` (`measured` when the extra is
installed, else the roofline). A layout is covered when the hardware is one the
tables were measured on (`SYSTEMS`, by hardware preset name), the engine has
tables there, the model is one the composition knows (dense GQA, MLA + MoE), the
layout has no pipeline stages and no attention-FFN split, and every term of the
composition finds its table. A step is priced by one source: a term the tables
lack sends the whole layout to the roofline (the two sources' terms follow
different overlap rules, a sum of both would be neither's step).

`price_layout` reads the tables and evaluates every term on its grids
(`costmodel.measured.prices`): seconds per layout, once, at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from costmodel.errors import CostModelError
from costmodel.measured.catalog import Engine, default_version
from costmodel.measured.compose import Dtypes, Phase
from costmodel.measured.compose import Layout as TableLayout
from costmodel.measured.prices import PhaseCurves, phase_curves, rank_kv_limit
from costmodel.model_spec import AttentionKind
from costmodel.precision import BYTES_PER_ELEMENT, Precision


class CostSourceKind(Enum):
    ROOFLINE = "roofline"
    MEASURED = "measured"
    AUTO = "auto"

    @classmethod
    def parse(cls, text: str, where: str = "cost_source") -> CostSourceKind:
        try:
            return cls(text)
        except ValueError:
            raise CostModelError(f"{where}: unknown cost source {text!r} (expected one of "
                                 f"{', '.join(k.value for k in cls)})") from None


DEFAULT_COST_SOURCE = CostSourceKind.ROOFLINE

# Hardware presets measured by aiconfigurator-core 0.12, by preset name -> its system.
SYSTEMS = {"h100": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "b300": "b300_sxm",
           "gb200": "gb200", "gb300": "gb300"}


@dataclass(frozen=True)
class Uncovered:
    """Why the tables do not price a layout: term -> reason."""

    reasons: dict[str, str]

    def line(self) -> str:
        return "; ".join(f"{term} ({why})" for term, why in self.reasons.items())


@dataclass(frozen=True)
class MeasuredLayout:
    """A worker layout's step terms from the tables, on grids (`prices.PhaseCurves`)."""

    system: str
    engine: Engine
    version: str  # the engine version queried (each family may come from an older one)
    versions: dict[str, str]  # table family -> the version its file was read from
    prefill: PhaseCurves
    decode: PhaseCurves
    sources: dict[str, str]  # term -> the table (or rule) that priced it

    @property
    def tables(self) -> str:
        return f"{self.system}/{self.engine.value}/{self.version}"


def composition(model) -> str | None:
    """The composition that prices `model` ("gqa", "mla_moe"), None if none does."""
    plain = model.linear is None and model.n_sliding_layers == 0
    if plain and model.attention is AttentionKind.MLA and model.moe is not None and (
            model.moe.latent_size == 0):
        return "mla_moe"
    if plain and model.gqa is not None and model.moe is None:
        return "gqa"
    return None


def _dtypes(model, layout) -> Dtypes | str:
    """The tables' dtype names for the layout's precisions, or why there are none."""
    block = composition(model) == "mla_moe"  # DeepSeek's checkpoints are block-scaled fp8
    names = {Precision.BF16: "bfloat16", Precision.FP8: "fp8_block" if block else "fp8",
             Precision.FP4: "nvfp4"}
    kv = {Precision.BF16: "bfloat16", Precision.FP8: "fp8"}.get(Precision(layout.kv))
    if kv is None:
        return f"kv precision {Precision(layout.kv).name.lower()}"
    # GQA attention runs in the KV cache's precision; the MLA block's math in bf16.
    fmha = "bfloat16" if block else kv
    return Dtypes(gemm=names[layout.attention_precision], moe=names[Precision(layout.weights)],
                  kv=kv, fmha=fmha)


def precheck(model, hardware, layout, engine: str) -> Uncovered | None:
    """What rules the layout out before any table is read (None: nothing)."""
    whole = []  # what rules out every term
    if hardware.name not in SYSTEMS:
        whole.append(f"no tables for hardware {hardware.name!r} (measured: {', '.join(SYSTEMS)})")
    if engine not in {e.value for e in Engine}:
        whole.append(f"no tables for engine {engine!r}")
    if composition(model) is None:
        whole.append(f"no measured composition for model {model.name!r}")
    if getattr(layout, "experts_hardware", None) is not None:
        whole.append("attention-FFN split layouts")
    reasons = {"all terms": "; ".join(whole)} if whole else {}
    if layout.pp != 1:
        reasons["pipeline"] = f"pp={layout.pp}: the composition has no pipeline stages"
    dt = _dtypes(model, layout)
    if isinstance(dt, str):
        reasons["attention"] = dt
    return Uncovered(reasons) if reasons else None


def price_layout(model, hardware, layout, engine: str, load) -> MeasuredLayout | Uncovered:
    """A layout's curves from the tables, or why they do not cover it. `load(system,
    engine, version, families)` reads tables (`tables.load_tables`, memoised by the
    caller)."""
    from costmodel.measured.compose import gqa_attention, gqa_terms
    from costmodel.measured.compose_mla import mla_attention, mla_moe_terms
    from costmodel.measured.tables import GQA_FAMILIES, MLA_MOE_FAMILIES

    ruled_out = precheck(model, hardware, layout, engine)
    if ruled_out is not None:
        return ruled_out
    system, eng = SYSTEMS[hardware.name], Engine(engine)
    version = default_version(system, eng)
    kind = composition(model)
    tables = load(system, eng, version, GQA_FAMILIES if kind == "gqa" else MLA_MOE_FAMILIES)
    ranks = layout.stage_gpus // layout.tp
    tl = TableLayout(tp=layout.tp, ep=layout.ep, dp_attention=ranks)
    dt = _dtypes(model, layout)
    terms_of, attention_of = ((gqa_terms, gqa_attention) if kind == "gqa"
                              else (mla_moe_terms, mla_attention))
    layers = model.n_full_layers + model.n_sliding_layers
    kv_per_gpu = (model.kv_bytes_per_token(BYTES_PER_ELEMENT[layout.kv])
                  / model.kv_tp_split(layout.tp))
    kv_limit = rank_kv_limit(hardware.hbm_bytes, kv_per_gpu)
    curves, sources, missing = {}, {}, {}
    for phase in Phase:
        def terms(shape, phase=phase):
            built = terms_of(tables, model, tl, dt, phase, shape).result()
            sources.update(built.sources)
            return built

        def attention(batch, lengths, phase=phase):
            return attention_of(tables, model, tl, dt, phase, batch, lengths)

        got = phase_curves(terms, attention, layers, phase, kv_limit)
        if isinstance(got, dict):
            missing.update({k: str(v) for k, v in got.items()})
        else:
            curves[phase] = got
    if missing:
        return Uncovered(missing)
    tag = f"measured:{system}/{eng.value}/"
    for term, table in (("attention_prefill", "context_attention"),
                        ("attention_decode", "generation_attention")):
        if kind == "mla_moe":  # the whole MLA block, projections included
            table = table.replace("attention", "mla_module")
        sources[term] = f"{tag}{tables.versions[table]}:{table}"
    return MeasuredLayout(system=system, engine=eng, version=version,
                          versions=dict(tables.versions), prefill=curves[Phase.PREFILL],
                          decode=curves[Phase.DECODE], sources=sources)

