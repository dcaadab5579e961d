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
from typing import TYPE_CHECKING

from orchestrator.cli._common import (
    UserError,
    add_overwrite_option,
    atomic_path,
    check_new_file,
    positive_float,
    print_json,
)

# The fill's batch is one part of what a user waits for (queueing, the KV transfer and
# decode admission come on top): a fifth of replay's default 10 s TTFT target.
DEFAULT_TTFT_TARGET_S = 2.0
# 20 tokens/s per user at the trace's p90 context, half replay's default 0.1 s target.
DEFAULT_TPOT_TARGET_S = 0.05
GB = 1e9

if TYPE_CHECKING:
    from costmodel.plan import Plan, PoolPlan


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
    p.add_argument("--gpus", required=True, type=_gpus, metavar="N", help="GPUs to plan")
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
    p.add_argument("--precision", help="weights: bf16, fp8 or fp4 (default: the model's "
                   "routed-expert precision if it ships one, else fp8)")
    p.add_argument("--kv-precision", default="bf16", help="KV cache: bf16 or fp8 (default bf16)")
    p.add_argument("--name", help="the cluster's name (default: --out's stem, else 'planned')")
    p.add_argument("--out", type=Path, metavar="FILE", help="write the cluster TOML here")
    add_overwrite_option(p, "an existing --out FILE")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


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
    words = ["tokenfactory", "plan", "--model", args.model, "--hardware", args.hardware,
             "--gpus", str(args.gpus), "--trace", *(str(t) for t in args.trace)]
    for option, value, default in (
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

    from costmodel.plan import WorkloadStats
    from orchestrator.control.router import MIDFILL_MIN_PREFIX_TOKENS
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
    from costmodel.plan import Targets, plan_cluster
    from costmodel.plan_toml import render_cluster_toml
    from workers.cluster import ClusterError
    from workers.cluster_toml import cluster_from_dict

    model = _load("--model", load_model, args.model)
    hw = _load("--hardware", load_hardware, args.hardware)
    weights, kv = _precisions(args, model)
    _check_out(args.out, args.overwrite)
    workload = workload_from_traces(list(args.trace), args.format)
    plan = plan_cluster(model, hw, args.gpus, workload, Targets(args.ttft_target,
                                                                args.tpot_target),
                        weights, kv)
    name = args.name or (args.out.stem if args.out is not None else "planned")
    command = _command(args)
    text = render_cluster_toml(plan, name, command, args.hardware)
    try:  # the file must be one replay runs: read it back and bind it as replay would
        cluster_from_dict(tomllib.loads(text), "planned cluster").bind(model)
    except ClusterError as exc:
        raise UserError(f"the planned cluster does not bind ({exc}); please report") from None
    if args.out is not None:
        with atomic_path(args.out, args.overwrite) as tmp:
            tmp.write_text(text)
    if args.json:
        print_json(plan_dict(plan, str(args.out) if args.out else None))
    else:
        print_plan(plan, args.out)
    return 0

def _r(x: float, digits: int = 4) -> float | None:
    return None if not math.isfinite(x) else round(float(x), digits)


def pool_dict(p: PoolPlan) -> dict[str, object]:
    from costmodel.phase import Phase

    c, decode = p.choice, p.choice.phase is Phase.DECODE
    return {
        "name": p.name, "phase": c.phase.name.lower(), "workers": p.workers,
        "gpus_per_worker": c.gpus, "gpus": p.gpus,
        "pp": c.pp, "tp": c.tp, "ep": c.ep, "attention_ranks": c.ranks,
        "batch_per_rank": c.batch, "slots_per_worker": c.slots, "slots": c.slots * p.workers,
        "precision": c.precision.name.lower(), "kv_precision": c.kv_precision.name.lower(),
        "mtp": c.mtp,
        "tokens_per_s_per_gpu": _r(c.tokens_per_s_per_gpu, 1),
        "tpot_s" if decode else "ttft_s": _r(c.latency_s),
        "checked_at": {"new_tokens": _r(p.shape.typical_new_tokens, 0),
                       "context_tokens": _r(p.shape.typical_context, 0),
                       "kv_fit_context_tokens": _r(p.shape.check_context, 0)},
        # The KV of a full worker at the latency check's context (decode: kv_fit_context).
        "hbm_gb_per_gpu": {"weights": _r(c.weight_bytes_per_gpu / GB, 2),
                           "kv": _r(c.kv_bytes_per_gpu / GB, 2),
                           "total": _r(c.hbm_bytes_per_gpu / GB, 2)},
        "kv_capacity_tokens_per_worker": c.kv_capacity_tokens,
        "calls": p.shape.calls,
        "gpu_s_per_call": _r(c.gpu_s_per_call, 5),
        "calls_per_s": _r(p.calls_per_s, 3),
    }


def plan_dict(plan: Plan, out: str | None) -> dict[str, object]:
    w = plan.workload
    return {
        "model": plan.model, "hardware": plan.hardware.name, "gpus": plan.gpus,
        "gpus_used": plan.used_gpus, "nodes": plan.nodes.count,
        "gpus_per_node": plan.nodes.gpus_each,
        "targets": {"ttft_s": plan.targets.ttft_s, "tpot_s": plan.targets.tpot_s},
        "trace": {"sessions": w.sessions, "calls": w.calls,
                  "calls_per_session_hour": _r(w.calls_per_session_s * 3600, 2),
                  "arrivals_per_s": None if w.arrivals_per_s is None
                  else _r(w.arrivals_per_s, 3)},
        "pools": [pool_dict(p) for p in plan.pools],
        "decode_slots": plan.decode_slots,
        "calls_per_s": _r(plan.calls_per_s, 3),
        "sessions_per_hour": _r(plan.sessions_per_hour, 1),
        "concurrent_sessions": _r(plan.concurrent_sessions, 1),
        "out": out,
    }


def _session_pace(w) -> str:
    """The trace's calls per active session-hour; a trace whose sessions spend no time
    between calls (one call each, or no think gaps: Azure, Mooncake) has no such pace."""
    rate = w.calls_per_session_s
    if not math.isfinite(rate):
        what = ("one call per session" if w.calls == w.sessions
                else "no time recorded between a session's calls")
        return f"{what}, so no calls per active session-hour (the arrivals set the pace)"
    return f"{rate * 3600:.1f} calls per active session-hour"


def print_plan(plan: Plan, out: Path | None) -> None:
    from costmodel.phase import Phase

    w = plan.workload
    print(f"{plan.model} on {plan.gpus} {plan.hardware.name} GPUs ({plan.nodes.count} node(s) "
          f"of up to {plan.nodes.gpus_each}); trace: {w.sessions} sessions, {w.calls:,} calls, "
          f"{_session_pace(w)}")
    print(f"targets: fill step <= {plan.targets.ttft_s:g} s, decode TPOT <= "
          f"{plan.targets.tpot_s * 1e3:g} ms")
    for p in plan.pools:
        c = p.choice
        decode = c.phase is Phase.DECODE
        # The cost core's KV is at the step's end: a fill's prefix plus its new tokens.
        kv_at = (p.shape.check_context if decode
                 else p.shape.typical_context + p.shape.typical_new_tokens)
        lat = (f"TPOT {c.latency_s * 1e3:.1f} ms at {p.shape.check_context:,.0f} tokens"
               if decode else f"step {c.latency_s:.2f} s for {c.slots} x "
               f"{p.shape.typical_new_tokens:,.0f} new on {p.shape.typical_context:,.0f} cached")
        print(f"\n{p.name}: {p.workers} worker(s) x {c.gpus} GPUs = {p.gpus}  "
              f"[pp {c.pp} tp {c.tp} ep {c.ep}: {c.ranks} attention rank(s)"
              + (f"; MTP {c.mtp}]" if c.mtp else "]"))
        print(f"  batch {c.batch} per rank, {c.slots} slots a worker, "
              f"{c.slots * p.workers} in all; {lat}")
        print(f"  {c.tokens_per_s_per_gpu:,.0f} tokens/s per GPU; HBM per GPU "
              f"{c.hbm_bytes_per_gpu / GB:.0f} GB (weights {c.weight_bytes_per_gpu / GB:.0f}, "
              f"KV {c.kv_bytes_per_gpu / GB:.0f} at {kv_at:,.0f} tokens)")
        print(f"  {p.shape.calls:,} calls of the trace, {c.gpu_s_per_call:.3f} GPU-s per call "
              f"of the mix: sustains {p.calls_per_s:.2f} calls/s")
    spare = plan.gpus - plan.used_gpus
    pace = (f", ~{plan.concurrent_sessions:,.0f} concurrent sessions at the trace's pace"
            if math.isfinite(plan.concurrent_sessions) else "")
    print(f"\nsized for {plan.calls_per_s:.2f} calls/s (~{plan.sessions_per_hour:,.0f} sessions "
          f"per hour{pace}); {plan.decode_slots} decode slots"
          + (f"; {spare} GPU(s) spare" if spare else ""))
    if w.arrivals_per_s is not None:
        print(f"the trace's own arrivals: {w.arrivals_per_s:.2f} calls/s "
              f"({plan.calls_per_s / w.arrivals_per_s:.1f}x headroom)")
    if out is not None:
        print(f"wrote {out}")
