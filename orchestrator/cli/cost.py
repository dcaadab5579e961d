"""`tokenfactory cost`: the cost core's figures for one phase configuration."""

from __future__ import annotations

import argparse

from orchestrator.cli._common import non_negative_int, positive_int, print_json

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
        description="Price one step of a phase with the roofline core. For decode, --batch is "
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
    p.add_argument("--precision", default="fp8", help="weights: bf16, fp8 or fp4 (default fp8)")
    p.add_argument("--kv-precision", default="bf16", help="KV cache: bf16 or fp8 (default bf16)")
    p.add_argument("--mtp", type=non_negative_int, default=0,
                   help="decode: tokens drafted per step by multi-token prediction (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from costmodel.hardware import load_hardware
    from costmodel.layout import Layout
    from costmodel.model import load_model
    from costmodel.phase import Bound, Phase, evaluate
    from costmodel.precision import Precision

    model = load_model(args.model)
    hw = load_hardware(args.hardware)
    layout = Layout(pp=args.pp, tp=args.tp, ep=args.ep, weights=Precision.parse(args.precision),
                    kv=Precision.parse(args.kv_precision), mtp=args.mtp)
    phase = Phase[args.phase.upper()]
    new_tokens = 1 if phase is Phase.DECODE else args.new_tokens
    row = evaluate(model, hw, phase, args.batch, new_tokens, args.context, layout)
    row["bound"] = Bound(int(row["bound"])).name.lower()
    row["fits"] = bool(row["fits"])
    if args.json:
        print_json({"model": model.name, "hardware": hw.name, "phase": args.phase,
                    "batch": args.batch, "new_tokens": new_tokens, "context": args.context,
                    "pp": args.pp, "tp": args.tp, "ep": args.ep, **row})
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{model.name} {args.phase} on {hw.name}: batch {args.batch}, "
                        f"{new_tokens} new + {args.context} cached tokens, "
                        f"PP{args.pp} TP{args.tp} EP{args.ep}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, label, scale, unit in _FIGURES:
        table.add_row(label, f"{row[key] * scale:,.3f} {unit}".rstrip())
    table.add_row("bound", row["bound"])
    table.add_row("fits in HBM", "yes" if row["fits"] else "NO")
    Console().print(table)
    return 0
