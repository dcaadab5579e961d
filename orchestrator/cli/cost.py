"""`tokenfactory cost`: the cost core's figures for one phase configuration.

A layout that cannot run (heads, experts, layer groups, scale-up domain) is an
error; one that runs but does not fit in HBM at the given batch and context is
priced all the same, with `fits` false and one warning line on stderr.
"""

from __future__ import annotations

import argparse
import sys

from orchestrator.cli._common import (
    add_cost_source_option,
    add_service_options,
    non_negative_int,
    positive_int,
    print_json,
)

_FIGURES = (
    # (key, label, unit scale, unit)
    ("step_time_s", "step time (one micro-batch, all stages)", 1e3, "ms"),
    ("tpot_s", "time per output token", 1e3, "ms"),
    ("tokens_per_s_per_gpu", "tokens/s per GPU", 1, "tok/s"),
    ("gpus", "GPUs per instance", 1, ""),
    ("hbm_bytes_per_gpu", "resident HBM per GPU", 1e-9, "GB"),
    ("weight_bytes_per_gpu", "  of which weights", 1e-9, "GB"),
    ("kv_bytes_per_gpu", "  of which KV and state", 1e-9, "GB"),
    ("hbm_bytes_per_gpu_double_buffered", "resident HBM, double-buffered", 1e-9, "GB"),
    ("scale_up_bytes_per_s_per_gpu", "scale-up traffic per GPU", 1e-9, "GB/s"),
    ("scale_out_bytes_per_s_per_gpu", "scale-out traffic per GPU", 1e-9, "GB/s"),
    ("energy_j", "energy per step (instance)", 1, "J"),
    ("energy_per_token_j", "energy per token", 1, "J"),
    ("compute_s", "stage compute time", 1e3, "ms"),
    ("memory_s", "stage HBM time", 1e3, "ms"),
    ("network_s", "stage network time", 1e3, "ms"),
    ("latency_s", "stage fixed latencies", 1e3, "ms"),
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cost",
        help="cost of one phase step on given hardware and layout",
        description="Price one step of a phase with the roofline core, or from measured "
        "kernel tables with --cost-source (docs/measured-tables.md). For decode, --batch is "
        "the sequences decoding together per attention DP rank and --context the KV length "
        "each holds; for prefill/midfill, --new-tokens are the new tokens per sequence and "
        "--context the cached prefix.",
    )
    p.add_argument("--model", required=True, help="preset name or path to a config.json")
    p.add_argument("--hardware", required=True, help="preset name or path to a .toml file")
    p.add_argument("--phase", required=True, choices=("prefill", "midfill", "decode"))
    p.add_argument("--batch", required=True, type=positive_int, help="sequences per DP rank")
    p.add_argument("--new-tokens", type=positive_int, default=1,
                   help="new tokens per sequence (prefill/midfill; default 1)")
    p.add_argument("--context", type=non_negative_int, default=0,
                   help="cached tokens per sequence (default 0)")
    p.add_argument("--pp", type=positive_int, default=1, help="pipeline stages (default 1)")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor parallel (default 1)")
    p.add_argument("--ep", type=positive_int, default=1, help="expert parallel (default 1)")
    p.add_argument("--precision", default="fp8",
                   help="routed-expert weights: bf16, fp8 or fp4 (default fp8)")
    p.add_argument("--attention-precision", choices=("bf16", "fp8"),
                   help="every other weight (attention, dense FFN, shared experts, router, "
                        "LM head) (default: --precision, but fp8 for fp4)")
    p.add_argument("--kv-precision", default="bf16", help="KV cache: bf16 or fp8 (default bf16)")
    p.add_argument("--mtp", type=non_negative_int,
                   help="decode: tokens drafted per step by multi-token prediction (default: "
                        "one per MTP module the model ships, 0 for none)")
    af = p.add_argument_group(
        "attention-FFN split (decode only)",
        "Routed experts on a separate expert instance; --tp/--ep then set the attention "
        "instance only (max(tp, ep) GPUs, max(tp, ep)/tp attention DP ranks).")
    af.add_argument("--af-experts-hardware", metavar="H",
                    help="hardware of the expert instance (enables the split)")
    af.add_argument("--af-experts-ep", type=positive_int, metavar="N",
                    help="GPUs of the expert instance")
    af.add_argument("--af-experts-precision", metavar="P",
                    help="expert weights: bf16, fp8 or fp4 (default: --precision)")
    af.add_argument("--af-attention-per-expert", type=positive_int, default=1, metavar="N",
                    help="attention instances sharing one expert instance (default 1)")
    af.add_argument("--af-network", choices=("auto", "scale-up", "scale-out"), default="auto",
                    help="link between the instances; auto: scale-up when both hardware are "
                    "the same and all GPUs fit one scale-up domain (default auto)")
    add_service_options(p)
    add_cost_source_option(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


_AF_FIGURES = (
    ("step_time_s", "step time", 1e3, "ms"),
    ("tpot_s", "time per output token", 1e3, "ms"),
    ("tokens_per_s_per_gpu", "tokens/s per GPU (attention + expert share)", 1, "tok/s"),
    ("gpus", "GPUs per attention instance, with its expert share", 1, ""),
    ("attention_s", "attention-side kernel time", 1e3, "ms"),
    ("expert_s", "expert-side kernel time", 1e3, "ms"),
    ("network_s", "network time (TP + attention<->expert)", 1e3, "ms"),
    ("latency_s", "fixed latencies", 1e3, "ms"),
    ("experts_read_per_gpu_per_layer", "experts read per expert GPU per layer", 1, ""),
    ("attention_hbm_bytes_per_gpu", "resident HBM per attention GPU", 1e-9, "GB"),
    ("kv_bytes_per_gpu", "  of which KV and state", 1e-9, "GB"),
    ("expert_hbm_bytes_per_gpu", "resident HBM per expert GPU", 1e-9, "GB"),
    ("attention_energy_j", "energy per step (attention instance)", 1, "J"),
    ("expert_energy_j", "energy per step (expert instance)", 1, "J"),
    ("energy_per_token_j", "energy per token", 1, "J"),
)


def _capacity(model, hw, layout, context: int, weight_bytes=None) -> dict[str, int]:
    """KV one instance holds beside its weights, replication across TP ranks counted."""
    from costmodel.capacity import kv_capacity

    cap = kv_capacity(model, hw, layout, weight_bytes=weight_bytes)
    return {"kv_capacity_tokens": cap.kv_capacity_tokens,
            "kv_capacity_sequences": cap.sequences_at(context)}


def _warn_unfit(resident_bytes: float, hw, what: str, args: argparse.Namespace) -> None:
    """One line on stderr: the layout's figures stand, but it does not fit."""
    sys.stderr.write(
        f"warning: does not fit: {resident_bytes / 1e9:.1f} GB per GPU > "
        f"{hw.hbm_bytes / 1e9:.1f} GB HBM of {hw.name} ({what}; batch {args.batch}, "
        f"context {args.context})\n")


def _print_table(title: str, figures, row: dict, extra: list[tuple[str, str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, label, scale, unit in figures:
        table.add_row(label, _value(row[key] * scale, unit))
    for label, value in extra:
        table.add_row(label, value)
    table.add_row("fits in HBM", "yes" if row["fits"] else "NO")
    Console().print(table)


def _value(value: float, unit: str) -> str:
    """A figure as read: a count (no unit, a whole number: GPUs, experts) without
    decimals, everything else to three."""
    if not unit and float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.3f} {unit}".rstrip()


def _capacity_rows(row: dict, context: int) -> list[tuple[str, str]]:
    return [("KV capacity per instance", f"{row['kv_capacity_tokens']:,} tokens"),
            (f"  sequences of {context:,} tokens", f"{row['kv_capacity_sequences']:,}")]


def _run_split(args: argparse.Namespace, model, hw, layout) -> int:
    from costmodel.disagg import AFLayout, af_evaluate
    from costmodel.hardware import load_hardware
    from costmodel.precision import Precision
    from orchestrator.cli._common import UserError

    if args.phase != "decode":
        raise UserError(f"--af-experts-hardware: the split prices decode only, not {args.phase}")
    if args.af_experts_ep is None:
        raise UserError("--af-experts-ep: required with --af-experts-hardware")
    ehw = load_hardware(args.af_experts_hardware)
    n, ep = args.af_attention_per_expert, args.af_experts_ep
    split_gpus = n * layout.instance_gpus + ep
    same = {"scale-up": True, "scale-out": False}.get(args.af_network, ehw.name == hw.name and (
        split_gpus <= min(hw.scale_up_domain_gpus, ehw.scale_up_domain_gpus)))
    eprec = Precision.parse(args.af_experts_precision or args.precision)
    split = AFLayout(pp=layout.pp, tp=layout.tp, ep=layout.ep, weights=layout.weights,
                     kv=layout.kv, mtp=layout.mtp, attention_weights=layout.attention_weights,
                     experts_hardware=ehw, experts_ep=ep, experts_weights=eprec,
                     attention_per_expert=n, same_domain=same)
    # A side whose weights alone overflow is still refused here (its one-line error names
    # the side); resident HBM over capacity at this batch and context is reported.
    row = af_evaluate(model, hw, split, args.batch, args.context, _service(args, model))
    row["fits"] = bool(row["fits"])
    row |= _capacity(model, hw, layout, args.context,
                     weight_bytes=row["attention_weight_bytes_per_gpu"])
    row |= _priced_by(args, model, hw, split, None, 1, row)  # the tables have no split
    head = {"model": model.name, "hardware": hw.name, "phase": "decode", "batch": args.batch,
            "context": args.context, "tp": args.tp, "ep": args.ep, "mtp": layout.mtp,
            "precision": layout.weights.name.lower(),
            "attention_precision": layout.attention_precision.name.lower(),
            "experts_hardware": ehw.name, "experts_ep": ep, "attention_per_expert": n,
            "network": "scale-up" if same else "scale-out", **_service_head(args, model)}
    for resident, side_hw, what in ((row["attention_hbm_bytes_per_gpu"], hw, "attention GPUs"),
                                    (row["expert_hbm_bytes_per_gpu"], ehw, "expert GPUs")):
        if resident > side_hw.hbm_bytes:
            _warn_unfit(resident, side_hw, what, args)
    if args.json:
        print_json({**head, **row})
        return 0
    _print_table(f"{model.name} decode, attention on {hw.name} TP{args.tp} "
                 f"({layout.stage_gpus // args.tp} DP ranks) x{n}, experts on "
                 f"{ehw.name} EP{ep} over {head['network']}: batch {args.batch}, "
                 f"{args.context} cached tokens, MTP {layout.mtp}",
                 _AF_FIGURES, row, _capacity_rows(row, args.context))
    return 0


def _service(args: argparse.Namespace, model):
    """The efficiency the engine and the MTP acceptance make (costmodel.engines)."""
    from costmodel.engines import serving_efficiency

    return serving_efficiency(model, args.engine, args.mtp_acceptance)


def _service_head(args: argparse.Namespace, model) -> dict:
    from costmodel.engines import DEFAULT_ENGINE

    eff = _service(args, model)
    return {"engine": args.engine or DEFAULT_ENGINE, "step_overhead_s": eff.step_overhead_s,
            "draft_overhead_s": eff.draft_overhead_s,
            "mtp_acceptance": list(eff.mtp_acceptance)}


def _priced_by(args: argparse.Namespace, model, hw, layout, phase, new_tokens: int,
               row: dict) -> dict:
    """The cost source's figures: under the measured tables (where they cover the
    layout) the step time, TPOT and tokens/s from them, the roofline's step kept beside;
    `sources` names what priced each term, `fell_back` what the tables lack."""
    from costmodel.configs import Phase
    from costmodel.engines import DEFAULT_ENGINE
    from costmodel.measured.prices import OutOfRange
    from workers.cost_sources import Pricers
    from workers.measured_pricing import MeasuredPricer

    engine = args.engine or DEFAULT_ENGINE
    pricers = Pricers(model, _service(args, model), engine, args.cost_source)
    label = f"{hw.name} PP{layout.pp} TP{layout.tp} EP{layout.ep}"
    pricer = pricers.pricer(label, hw, layout)
    pricers.warn()
    out = {"cost_source": pricers.kind.value}
    if not isinstance(pricer, MeasuredPricer):
        out["sources"] = {"step": "roofline"}
        fell_back = pricers.pools[label].get("fell_back")
        if fell_back:
            out["fell_back"] = fell_back
        return out
    sequences = args.batch * pricer.attention_ranks  # --batch is per attention rank
    try:
        if phase is Phase.DECODE:
            step_s = float(pricer.decode_step_times_s(sequences, [float(args.context)])[0])
            tpot_s = step_s / pricer.roofline.tokens_per_decode_step
        else:
            step_s = tpot_s = pricer.fill_once_s(phase, sequences, new_tokens, args.context)
    except OutOfRange as exc:  # more KV on a rank than its GPUs hold: no table goes there
        sys.stderr.write(f"warning: beyond the measured grid ({exc}); the roofline prices "
                         f"this step\n")
        return {**out, "sources": {"step": "roofline"}, "fell_back": {"all terms": str(exc)}}
    prices = pricer.prices
    drop = "attention_decode" if phase is not Phase.DECODE else "attention_prefill"
    sources = {k: v for k, v in prices.sources.items()
               if k != drop and not (phase is Phase.DECODE and k == "attention_extras")}
    if phase is Phase.DECODE and layout.mtp:
        sources["mtp_draft"] = "roofline"
    sources["engine_overhead"] = f"engines.toml:{engine}"
    sources["hbm_traffic_energy"] = "roofline"
    scale = row["step_time_s"] / step_s
    return {**out, "roofline_step_time_s": row["step_time_s"], "step_time_s": step_s,
            "tpot_s": tpot_s, "tokens_per_s_per_gpu": row["tokens_per_s_per_gpu"] * scale,
            "tables": prices.tables, "engine_version": prices.version,
            "table_versions": dict(prices.versions), "sources": sources}


def _layout(args: argparse.Namespace, model):
    from costmodel.layout import Layout
    from costmodel.mtp import default_mtp
    from costmodel.precision import Precision

    attention = (None if args.attention_precision is None
                 else Precision.parse(args.attention_precision))
    mtp = args.mtp if args.mtp is not None else (
        default_mtp(model) if args.phase == "decode" else 0)
    return Layout(pp=args.pp, tp=args.tp, ep=args.ep, weights=Precision.parse(args.precision),
                  kv=Precision.parse(args.kv_precision), mtp=mtp, attention_weights=attention)


def run(args: argparse.Namespace) -> int:
    from costmodel.hardware import load_hardware
    from costmodel.model import load_model
    from costmodel.phase import Bound, Phase, evaluate

    model = load_model(args.model)
    hw = load_hardware(args.hardware)
    layout = _layout(args, model)
    if args.af_experts_hardware is not None:
        return _run_split(args, model, hw, layout)
    if args.af_experts_ep is not None:
        from orchestrator.cli._common import UserError

        raise UserError("--af-experts-ep: only with --af-experts-hardware")
    phase = Phase[args.phase.upper()]
    new_tokens = 1 if phase is Phase.DECODE else args.new_tokens
    row = evaluate(model, hw, phase, args.batch, new_tokens, args.context, layout,
                   _service(args, model))
    row["bound"] = Bound(int(row["bound"])).name.lower()
    row["fits"] = bool(row["fits"])
    row |= _capacity(model, hw, layout, args.context)
    row |= _priced_by(args, model, hw, layout, phase, new_tokens, row)
    if not row["fits"]:
        _warn_unfit(row["hbm_bytes_per_gpu"], hw,
                    f"{row['weight_bytes_per_gpu'] / 1e9:.1f} GB of it weights", args)
    if args.json:
        print_json({"model": model.name, "hardware": hw.name, "phase": args.phase,
                    "batch": args.batch, "new_tokens": new_tokens, "context": args.context,
                    "pp": args.pp, "tp": args.tp, "ep": args.ep, "mtp": layout.mtp,
                    "precision": layout.weights.name.lower(),
                    "attention_precision": layout.attention_precision.name.lower(),
                    "kv_precision": layout.kv.name.lower(), **_service_head(args, model),
                    **row})
        return 0
    _print_table(f"{model.name} {args.phase} on {hw.name}: batch {args.batch}, "
                 f"{new_tokens} new + {args.context} cached tokens, "
                 f"PP{args.pp} TP{args.tp} EP{args.ep}, experts "
                 f"{layout.weights.name.lower()}, rest "
                 f"{layout.attention_precision.name.lower()}"
                 + (f", MTP {layout.mtp}" if phase is Phase.DECODE else ""),
                 _FIGURES, row, [("bound", row["bound"]), *_capacity_rows(row, args.context)])
    return 0
