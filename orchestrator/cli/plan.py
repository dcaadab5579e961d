"""`tokenfactory plan`: size a cluster's pools for a trace with the cost core and write
the cluster description `replay --cluster FILE` runs (docs/plan.md).

The planning itself is `costmodel.plan` (pure); this module reads the traces, prints
why each pool got its layout, and writes the TOML atomically after checking that the
cluster binds to the model as a replay would bind it.
"""

from __future__ import annotations

import argparse
import math
import shlex
from pathlib import Path

from costmodel.plan_values import ARRANGEMENTS, AUTO, DEFAULT_MEMORY_FRACTION
from orchestrator.cli._common import (
    UserError,
    add_overwrite_option,
    add_service_options,
    atomic_path,
    check_new_file,
    positive_float,
    positive_int,
    print_json,
)
from orchestrator.cli._plan_output import plan_dict, print_plan

# The fill's batch is one part of what a user waits for (queueing, the KV transfer and
# decode admission come on top): a fifth of replay's default 10 s TTFT target.
DEFAULT_TTFT_TARGET_S = 2.0
# 20 tokens/s per user at the trace's p90 context, half replay's default 0.1 s target.
DEFAULT_TPOT_TARGET_S = 0.05


def register(sub: argparse._SubParsersAction) -> None:
    from traces.formats import Format

    p = sub.add_parser(
        "plan", help="size prefill, midfill and decode pools for a trace; write a cluster",
        description="Pick each pool's PP/TP/EP layout and batch from the cost core's frontier "
        "under the targets and the HBM left for KV at the trace's context lengths, size the "
        "pools from the trace's work mix within --gpus, print why, and write a cluster TOML "
        "(docs/plan.md).")
    p.add_argument("--model", required=True, help="model preset or config.json path")
    p.add_argument("--hardware", required=True, help="hardware preset or .toml path")
    size = p.add_mutually_exclusive_group(required=True)
    size.add_argument("--gpus", type=_gpus, metavar="N", help="GPUs to plan")
    size.add_argument("--sessions-per-hour", type=positive_float, metavar="R",
                      help="find the fewest GPUs that sustain R session starts an hour of "
                      "the trace's sessions")
    size.add_argument("--concurrency", type=positive_int, metavar="N",
                      help="find the fewest GPUs that serve N concurrent users: N sessions "
                      "at the trace's own pace, or, for a trace with no time between a "
                      "session's calls, N users each with a call in flight")
    p.add_argument("--trace", required=True, nargs="+", type=Path, metavar="TRACE",
                   help="trace files or directories")
    p.add_argument("--format", choices=tuple(f.value for f in Format), default="auto",
                   help="trace format (default: detected from each file)")
    p.add_argument("--ttft-target", type=positive_float, default=DEFAULT_TTFT_TARGET_S,
                   metavar="S", help="fills: step time of a typical batch (default "
                   f"{DEFAULT_TTFT_TARGET_S:g} s)")
    p.add_argument("--tpot-target", type=positive_float, default=DEFAULT_TPOT_TARGET_S,
                   metavar="S", help="decode: time per output token at the trace's p90 "
                   f"context (default {DEFAULT_TPOT_TARGET_S:g} s)")
    p.add_argument("--arrangement", choices=(AUTO, *ARRANGEMENTS), default=AUTO,
                   help="pools: prefill, midfill and decode (three-pool); prefill and decode "
                   "(two-pool); aggregated workers that fill and decode (mixed); or auto, "
                   "the one that sustains the most calls/s (default)")
    p.add_argument("--memory-fraction", type=_fraction, default=DEFAULT_MEMORY_FRACTION,
                   metavar="F", help="share of each GPU's HBM a worker may allocate for "
                   "weights, activations and its KV, as an engine's static memory fraction "
                   f"(default {DEFAULT_MEMORY_FRACTION:g})")
    p.add_argument("--precision", help="weights: bf16, fp8 or fp4 (default: the model's "
                   "routed-expert precision if it ships one, else fp8)")
    p.add_argument("--kv-precision", default="bf16", help="KV cache: bf16 or fp8 (default bf16)")
    p.add_argument("--name", help="the cluster's name (default: --out's stem, else 'planned')")
    p.add_argument("--out", type=Path, metavar="FILE", help="write the cluster TOML here")
    add_overwrite_option(p, "an existing --out FILE")
    add_service_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= 1):
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


def _gpus(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _command(args: argparse.Namespace) -> str:
    """The command line that makes this plan again (options at their defaults left out)."""
    size = next((o, v) for o, v in (("--gpus", args.gpus),
                                    ("--sessions-per-hour", args.sessions_per_hour),
                                    ("--concurrency", args.concurrency)) if v is not None)
    words = ["tokenfactory", "plan", "--model", args.model, "--hardware", args.hardware,
             size[0], f"{size[1]:g}", "--trace", *(str(t) for t in args.trace)]
    for option, value, default in (
            ("--arrangement", args.arrangement, AUTO),
            ("--memory-fraction", args.memory_fraction, DEFAULT_MEMORY_FRACTION),
            ("--format", args.format, "auto"),
            ("--ttft-target", args.ttft_target, DEFAULT_TTFT_TARGET_S),
            ("--tpot-target", args.tpot_target, DEFAULT_TPOT_TARGET_S),
            ("--precision", args.precision, None), ("--kv-precision", args.kv_precision, "bf16"),
            ("--name", args.name, None), ("--out", args.out, None)):
        if value != default:
            words += [option, f"{value:g}" if isinstance(value, float) else str(value)]
    return " ".join(shlex.quote(w) for w in words)


def _check_out(out: Path | None, overwrite: bool) -> None:
    """Refuse an --out that cannot be written before any work is done."""
    import os

    if out is None:
        return
    parent = out.parent if str(out.parent) else Path(".")
    if out.is_dir():
        raise UserError(f"--out: {out} is a directory")
    check_new_file(out, overwrite)
    if not parent.is_dir():
        raise UserError(f"--out: {out}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise UserError(f"--out: {out}: not writable")


def workload_from_traces(paths: list[Path], fmt: str):
    """The planner's view of the traces: per call token counts, the sessions' active time."""
    import numpy as np

    from costmodel.fill_phase import MIDFILL_MIN_PREFIX_TOKENS
    from costmodel.plan_values import WorkloadStats
    from traces import read_sessions
    from traces.stats import session_duration_s

    for path in paths:
        if not path.exists():
            raise UserError(f"--trace: {path} does not exist")
    inp, cached, out, arrivals = [], [], [], []
    sessions, active_s = 0, 0.0
    for s in read_sessions(paths, fmt):
        sessions += 1
        active_s += session_duration_s(s)
        for c in s.calls:
            inp.append(c.input_tokens)
            cached.append(c.cached_tokens)
            out.append(c.output_tokens)
            if c.arrival_s is not None:
                arrivals.append(c.arrival_s)
    if not inp:
        raise UserError(f"--trace: no calls in {', '.join(str(p) for p in paths)}")
    return WorkloadStats(sessions, np.array(inp, dtype=np.float64),
                         np.array(cached, dtype=np.float64), np.array(out, dtype=np.float64),
                         active_s, MIDFILL_MIN_PREFIX_TOKENS,
                         max(arrivals) - min(arrivals) if len(arrivals) == len(inp) else None)


def _precisions(args: argparse.Namespace, model):
    from costmodel.errors import CostModelError
    from costmodel.precision import Precision

    def parse(option: str, text: str) -> Precision:
        try:
            return Precision.parse(text)
        except CostModelError as exc:
            raise UserError(f"{option}: {exc}") from None

    if args.precision is not None:
        weights = parse("--precision", args.precision)
    else:
        weights = model.routed_expert_precision or Precision.FP8
    return weights, parse("--kv-precision", args.kv_precision)


def _load(option: str, loader, value: str):
    from costmodel.errors import CostModelError

    try:
        return loader(value)
    except CostModelError as exc:
        raise UserError(f"{option}: {exc}") from None


def run(args: argparse.Namespace) -> int:
    import tomllib

    from costmodel.hardware import load_hardware
    from costmodel.model import load_model
    from costmodel.plan import plan_cluster
    from costmodel.plan_search import plan_for_rate
    from costmodel.plan_toml import render_cluster_toml
    from costmodel.plan_values import Targets
    from workers.cluster import ClusterError
    from workers.cluster_toml import cluster_from_dict

    model = _load("--model", load_model, args.model)
    hw = _load("--hardware", load_hardware, args.hardware)
    weights, kv = _precisions(args, model)
    _check_out(args.out, args.overwrite)
    workload = workload_from_traces(list(args.trace), args.format)
    targets = Targets(args.ttft_target, args.tpot_target)
    from costmodel.engines import DEFAULT_ENGINE, serving_efficiency

    engine = args.engine or DEFAULT_ENGINE
    eff = serving_efficiency(model, engine, args.mtp_acceptance)
    search, option = None, None
    if args.gpus is not None:
        plan = plan_cluster(model, hw, args.gpus, workload, targets, weights, kv,
                            arrangement=args.arrangement,
                            memory_fraction=args.memory_fraction, eff=eff)
    else:
        option, rate, slots = _asked(args, workload)
        search = plan_for_rate(model, hw, workload, targets, weights, kv, rate, slots=slots,
                               option=option, arrangement=args.arrangement,
                               memory_fraction=args.memory_fraction, eff=eff)
        plan = search.plan
    name = args.name or (args.out.stem if args.out is not None else "planned")
    command = _command(args)
    text = render_cluster_toml(plan, name, command, args.hardware, engine)
    try:  # the file must be one replay runs: read it back and bind it as replay would
        cluster_from_dict(tomllib.loads(text), "planned cluster").bind(model)
    except ClusterError as exc:
        raise UserError(f"the planned cluster does not bind ({exc}); please report") from None
    if args.out is not None:
        with atomic_path(args.out, args.overwrite) as tmp:
            tmp.write_text(text)
    if args.json:
        print_json({**plan_dict(plan, str(args.out) if args.out else None, search, option),
                    "engine": engine})
    else:
        print_plan(plan, args.out, search, option)
    return 0


def _asked(args: argparse.Namespace, workload) -> tuple[str, float, int]:
    """The search's option as typed, the calls a second it asks for and the decode slots
    it needs. R session starts an hour bring R x (calls per session) / 3600 calls a
    second in steady state. N concurrent users at the trace's pace (its calls per active
    session-second) bring N times that; a trace without such a pace (no time between a
    session's calls: each user sends the next call when the last is answered, as
    fixed-concurrency benchmarks run) needs N decode slots and, at the targets, at most
    N / (TTFT + mean output x TPOT) calls a second."""
    if args.sessions_per_hour is not None:
        r = args.sessions_per_hour
        return (f"--sessions-per-hour {r:g}", r * workload.calls / workload.sessions / 3600.0,
                0)
    n = args.concurrency
    pace = workload.calls_per_session_s
    if math.isfinite(pace) and pace > 0:
        return f"--concurrency {n}", n * pace, 0
    call_s = args.ttft_target + float(workload.output_tokens.mean()) * args.tpot_target
    return f"--concurrency {n}", n / call_s, n
