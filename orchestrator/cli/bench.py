"""`tokenfactory bench`: the load of the public serving benchmarks, on searched layouts,
and the throughput-interactivity frontier (docs/bench.md).

C users per concurrency, each sending its next call when the previous answer is
complete, lengths uniform in [R x nominal, nominal], a warm-up, K calls per user
(`orchestrator.bench.load`); without --cluster the layouts of the GPUs the public sweeps
try (`orchestrator.bench.layouts`); each point's figures as the harnesses define them
(`orchestrator.bench.measure`); the frontier, printed, as JSON, or written to --out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from orchestrator.cli._common import (
    UserError,
    add_cost_source_option,
    add_service_options,
    non_negative_int,
    positive_int,
    print_json,
)

ENGINES = ("trtllm", "sglang", "vllm")  # costmodel/data/engines.toml's
# Users of one point at most: a point replays every user's calls in one process (a
# million users of 6 calls is hours of CPU), and numpy draws the lengths in one array.
MAX_CONCURRENCY = 1_000_000


def _range_ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    from orchestrator.bench.load import DEFAULT_CALLS_PER_USER, WARMUP_CALLS

    p = sub.add_parser(
        "bench", help="the public benchmarks' fixed-concurrency load; the frontier of "
                      "tokens/s per GPU against tokens/s per user",
        description="Run the load SGLang's and vLLM's bench_serving run (C users, each "
                    "sending its next request when the previous answer is complete, lengths "
                    "uniform in [R x nominal, nominal]) at each concurrency, on layouts of the "
                    "GPUs searched as the public sweeps do (aggregated and disaggregated, MTP "
                    "off and on) or on --cluster files, and report each point and the Pareto "
                    "frontier of total tokens/s per GPU against interactivity (docs/bench.md).")
    p.add_argument("--model", required=True, help="model preset or config.json")
    p.add_argument("--hardware", help="hardware preset or .toml (required without --cluster)")
    p.add_argument("--gpus", type=positive_int, metavar="N",
                   help="GPUs to lay out (required without --cluster)")
    p.add_argument("--isl", required=True, type=positive_int, metavar="I",
                   help="nominal input tokens per call")
    p.add_argument("--osl", required=True, type=positive_int, metavar="O",
                   help="nominal output tokens per call")
    p.add_argument("--range-ratio", type=_range_ratio, default=1.0, metavar="R",
                   help="lengths uniform in [R x nominal, nominal], R in (0, 1] (default 1: "
                        "fixed lengths)")
    p.add_argument("--concurrency", required=True, metavar="C1,C2,...",
                   help="users in flight, one point per value")
    p.add_argument("--precision", help="routed-expert weights: bf16, fp8 or fp4 (default: the "
                                       "model's shipped format, else fp8)")
    p.add_argument("--kv-precision", default="bf16", help="KV cache: bf16 or fp8 (default bf16)")
    add_service_options(p)
    add_cost_source_option(p)
    p.add_argument("--mtp", type=non_negative_int, metavar="K",
                   help="MTP drafts per decode step (default: off and, where the model ships "
                        "a head, on with its drafts; both searched)")
    p.add_argument("--cluster", nargs="+", action="extend", metavar="FILE",
                   help="run these cluster files instead of searching layouts")
    p.add_argument("--calls-per-user", type=positive_int, default=DEFAULT_CALLS_PER_USER,
                   metavar="K", help=f"measured calls per user, after {WARMUP_CALLS} warm-up "
                                     f"call (default {DEFAULT_CALLS_PER_USER})")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of the lengths "
                                                                    "(default 0)")
    p.add_argument("--workers", type=positive_int, metavar="N",
                   help="processes running points (default: every core)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="write points.csv, frontier.csv, frontier.png and bench.json into "
                        "this new directory")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar on stderr (there is none with --json, or when stderr "
                        "is not a terminal)")
    p.set_defaults(run=run)


def concurrencies(text: str) -> list[int]:
    values = []
    for item in text.split(","):
        try:
            value = int(item.strip())
        except ValueError:
            value = 0
        if not 1 <= value <= MAX_CONCURRENCY:
            raise UserError(f"--concurrency {text}: expected integers in [1, "
                            f"{MAX_CONCURRENCY:,}], comma-separated ({item.strip()!r} is not)")
        values.append(value)
    return list(dict.fromkeys(values))


def _check_out(out: Path | None) -> None:
    import os

    if out is None:
        return
    parent = out.parent if str(out.parent) else Path(".")
    if out.exists():
        raise UserError(f"--out {out}: exists; bench writes a new directory")
    if not parent.is_dir():
        raise UserError(f"--out {out}: parent directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise UserError(f"--out {out}: parent directory {parent} is not writable")


def _load(option: str, loader, value: str):
    from costmodel.errors import CostModelError

    try:
        return loader(value)
    except CostModelError as exc:
        raise UserError(f"{option} {value}: {exc}") from None


def _precision(option: str, text: str):
    from costmodel.precision import Precision

    return _load(option, Precision.parse, text)


def _check_context(model, isl: int, osl: int) -> None:
    window = int(model.max_context_tokens)
    if isl >= window:
        raise UserError(f"--isl {isl}: beyond {model.name}'s context window of {window:,} "
                        f"tokens")
    if isl + osl > window:
        raise UserError(f"--osl {osl}: with --isl {isl} a call needs {isl + osl:,} tokens, "
                        f"beyond {model.name}'s context window of {window:,}")


def run(args: argparse.Namespace) -> int:
    from costmodel.model import load_model
    from orchestrator.bench.load import BenchLoad
    from orchestrator.bench.plan import BenchError, plan_points
    from orchestrator.bench.run import BenchShared, points_progress, run_points
    from orchestrator.run.output import run_dir

    concs = concurrencies(args.concurrency)
    model = _load("--model", load_model, args.model)
    _check_context(model, args.isl, args.osl)
    if not args.cluster and (args.hardware is None or args.gpus is None):
        missing = "--hardware" if args.hardware is None else "--gpus"
        raise UserError(f"{missing}: required without --cluster")
    _check_out(args.out)
    load = BenchLoad(isl=args.isl, osl=args.osl, range_ratio=args.range_ratio,
                     calls_per_user=args.calls_per_user, seed=args.seed)
    precision = (_precision("--precision", args.precision) if args.precision
                 else None)
    kv = _precision("--kv-precision", args.kv_precision)
    try:
        plan = plan_points(model, load, concs, hardware=args.hardware, gpus=args.gpus,
                           precision=precision, kv_precision=kv, mtp=args.mtp,
                           clusters=args.cluster or ())
    except BenchError as exc:
        raise UserError(str(exc)) from None
    shared = BenchShared(model=model, load=load, engine=args.engine,
                         mtp_acceptance=args.mtp_acceptance, cost_source=args.cost_source)
    # A bar on a terminal's stderr unless asked not to; none with --json, whose reader is
    # a program.
    quiet = args.no_progress or args.json
    with points_progress(len(plan.tasks), False if quiet else None) as advance:
        points = run_points(shared, plan.tasks, args.workers, advance)
    from orchestrator.bench.frontier import bench_json

    result = bench_json(points)
    if args.out is not None:
        from orchestrator.bench.output import write_outputs

        with run_dir(args.out) as directory:
            write_outputs(directory, result, plan.title)
    if args.json:
        print_json(result)
    else:
        print_table(result, plan.title, load)
    return 0


def _ms(value) -> str:
    return "-" if value is None else f"{value * 1e3:,.1f}"


def print_table(result: dict, title: str, load) -> None:
    from rich.table import Table

    from orchestrator.run.tables import print_table as print_rich

    on = {(p["layout"], p["concurrency"]) for p in result["frontier"]}
    table = Table(title=title)
    for name in ("", "conc", "layout", "GPUs", "tok/s/user", "total tok/s/GPU",
                 "output tok/s/GPU", "TTFT p50/p99 ms", "ITL p50/p99 ms", "E2E p50 s"):
        table.add_column(name, justify="left" if name in ("", "layout") else "right")
    for p in result["points"]:
        inter = p["interactivity"]
        table.add_row("*" if (p["layout"], p["concurrency"]) in on else "",
                      str(p["concurrency"]), p["layout"], str(p["gpus"]),
                      "-" if inter is None else f"{inter:,.1f}",
                      f"{p['total_tokens_per_s_per_gpu']:,.0f}",
                      f"{p['output_tokens_per_s_per_gpu']:,.0f}",
                      f"{_ms(p['ttft_s']['p50'])} / {_ms(p['ttft_s']['p99'])}",
                      f"{_ms(p['itl_s']['p50'])} / {_ms(p['itl_s']['p99'])}",
                      "-" if p["e2e_s"]["p50"] is None else f"{p['e2e_s']['p50']:,.2f}")
    print_rich(table)  # to a file or a pipe at its natural width: no header cut to "outp…"
    sys.stdout.write(f"* on the frontier. Each user's first {load.warmup_calls} call is "
                     f"warm-up, left out; figures over the steady window (docs/bench.md).\n")
